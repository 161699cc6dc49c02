//! The endpoint over a replica held in memory, spoken to over a real socket with the `kafka-protocol` crate's
//! client side: framing, ApiVersions, Metadata, ListOffsets, Fetch (long polling, isolation, budgets), the
//! refusals, and hostile frames that must end one connection and nothing else.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::config::{Limits, ServeConfig};
use crate::group::{CommittedOffset, Coordinator, OffsetStore};
use crate::replica::*;
use crate::Endpoint;

/// One partition "t"-0 whose batches are opaque byte runs of 100 bytes, one per offset.
struct Fake {
    batches: Mutex<Vec<Vec<u8>>>,
    last_stable: Mutex<i64>,
    changes: watch::Sender<u64>,
}

impl Fake {
    fn new(n: usize) -> Arc<Self> {
        let fake = Arc::new(Self {
            batches: Mutex::new(Vec::new()),
            last_stable: Mutex::new(0),
            changes: watch::Sender::new(0),
        });
        for _ in 0..n {
            fake.append();
        }
        fake
    }

    fn append(&self) {
        let mut batches = self.batches.lock().unwrap();
        let offset = batches.len() as u8;
        batches.push(vec![offset; 100]);
        *self.last_stable.lock().unwrap() = batches.len() as i64;
        drop(batches);
        self.changes.send_modify(|n| *n += 1);
    }

    fn ends_now(&self) -> PartitionEnds {
        let hw = self.batches.lock().unwrap().len() as i64;
        PartitionEnds {
            log_start: 0,
            high_watermark: hw,
            last_stable: *self.last_stable.lock().unwrap(),
            leader_epoch: 3,
        }
    }
}

impl Replica for Fake {
    fn link(&self) -> &str {
        "east"
    }
    fn state(&self) -> ReplicaState {
        ReplicaState::Replicating
    }
    fn topics(&self) -> Vec<TopicView> {
        vec![TopicView {
            name: "t".into(),
            id: [7; 16],
            partitions: vec![0],
            configs: vec![("cleanup.policy".into(), "delete".into())],
        }]
    }
    fn ends(&self, topic: &str, partition: i32) -> Result<PartitionEnds, ReadError> {
        if topic != "t" || partition != 0 {
            return Err(ReadError::UnknownPartition);
        }
        Ok(self.ends_now())
    }
    fn read(&self, topic: &str, partition: i32, offset: i64, max: usize, iso: Isolation) -> Result<Records, ReadError> {
        let ends = self.ends(topic, partition)?;
        if offset < 0 || offset > ends.high_watermark {
            return Err(ReadError::OutOfRange { offset, ends });
        }
        let upper = if iso == Isolation::ReadCommitted {
            ends.last_stable
        } else {
            ends.high_watermark
        };
        let batches = self.batches.lock().unwrap();
        let mut bytes = Vec::new();
        for b in batches.iter().take(upper as usize).skip(offset as usize) {
            if !bytes.is_empty() && bytes.len() + b.len() > max {
                break;
            }
            bytes.extend_from_slice(b);
        }
        Ok(Records {
            ends,
            bytes: Bytes::from(bytes),
            aborted: vec![AbortedTxn {
                producer_id: 9,
                first_offset: 1,
            }],
        })
    }
    fn offset_for_timestamp(&self, _: &str, _: i32, ts: i64) -> Result<Option<(i64, i64)>, ReadError> {
        Ok(Some((ts / 1000, ts)))
    }
    fn max_timestamp(&self, _: &str, _: i32) -> Result<Option<(i64, i64)>, ReadError> {
        Ok(None)
    }
    fn epoch_end(&self, _: &str, _: i32, epoch: i32) -> Result<(i32, i64), ReadError> {
        Ok((epoch.min(3), self.ends_now().high_watermark))
    }
    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

#[derive(Default)]
struct MemoryOffsets(Mutex<BTreeMap<String, Vec<CommittedOffset>>>);

impl OffsetStore for MemoryOffsets {
    fn commit(&self, group: &str, offsets: &[CommittedOffset]) -> Result<(), String> {
        self.0
            .lock()
            .unwrap()
            .entry(group.into())
            .or_default()
            .extend_from_slice(offsets);
        Ok(())
    }
    fn fetch(&self, group: &str) -> Result<Vec<CommittedOffset>, String> {
        Ok(self.0.lock().unwrap().get(group).cloned().unwrap_or_default())
    }
    fn groups(&self) -> Result<Vec<String>, String> {
        Ok(self.0.lock().unwrap().keys().cloned().collect())
    }
}

async fn start(replica: Arc<Fake>, limits: Limits) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = ServeConfig {
        advertised_host: "127.0.0.1".into(),
        advertised_port: i32::from(addr.port()),
        node_id: 0,
        cluster_id: "segmirror-east".into(),
        limits,
    };
    let groups = Coordinator::new(
        Arc::new(MemoryOffsets::default()),
        "east".into(),
        Arc::new(|topic: &str, partition: i32| topic == "t" && partition == 0),
    );
    let endpoint = Arc::new(Endpoint::new(replica, groups, config));
    tokio::spawn(crate::serve(listener, endpoint, None, std::future::pending()));
    addr.to_string()
}

struct Client {
    stream: TcpStream,
    correlation: i32,
}

impl Client {
    async fn connect(addr: &str) -> Self {
        Self {
            stream: TcpStream::connect(addr).await.unwrap(),
            correlation: 0,
        }
    }

    async fn call<Req, Resp>(&mut self, key: ApiKey, version: i16, request: &Req) -> std::io::Result<Resp>
    where
        Req: Encodable + HeaderVersion,
        Resp: Decodable + HeaderVersion,
    {
        self.correlation += 1;
        let mut header = RequestHeader::default();
        header.request_api_key = key as i16;
        header.request_api_version = version;
        header.correlation_id = self.correlation;
        header.client_id = Some(StrBytes::from_static_str("test"));
        let mut body = BytesMut::new();
        header.encode(&mut body, Req::header_version(version)).unwrap();
        request.encode(&mut body, version).unwrap();
        self.send_raw(&body).await?;
        let mut frame = self.receive().await?;
        let header = ResponseHeader::decode(&mut frame, Resp::header_version(version)).unwrap();
        assert_eq!(header.correlation_id, self.correlation);
        Ok(Resp::decode(&mut frame, version).unwrap())
    }

    async fn send_raw(&mut self, body: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(&(body.len() as i32).to_be_bytes()).await?;
        self.stream.write_all(body).await
    }

    async fn receive(&mut self) -> std::io::Result<Bytes> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).await?;
        let mut frame = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut frame).await?;
        Ok(Bytes::from(frame))
    }

    /// Whether the server closed the connection (EOF within a second).
    async fn closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(
            tokio::time::timeout(Duration::from_secs(1), self.stream.read(&mut byte)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }
}

fn fetch_request(offset: i64, max_wait_ms: i32, isolation: i8) -> FetchRequest {
    let mut partition = FetchPartition::default();
    partition.partition = 0;
    partition.fetch_offset = offset;
    partition.partition_max_bytes = 1 << 20;
    let mut topic = FetchTopic::default();
    topic.topic = TopicName(StrBytes::from_static_str("t"));
    topic.topic_id = uuid::Uuid::from_bytes([7; 16]);
    topic.partitions = vec![partition];
    let mut request = FetchRequest::default();
    request.replica_id = BrokerId(-1);
    request.max_wait_ms = max_wait_ms;
    request.min_bytes = 1;
    request.max_bytes = 50 << 20;
    request.isolation_level = isolation;
    request.session_epoch = -1;
    request.topics = vec![topic];
    request
}

#[tokio::test]
async fn api_versions_lists_what_is_served_and_answers_a_newer_version_in_v0() {
    let addr = start(Fake::new(1), Limits::default()).await;
    let mut client = Client::connect(&addr).await;
    let response: ApiVersionsResponse = client
        .call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .await
        .unwrap();
    assert_eq!(response.error_code, 0);
    let fetch = response
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::Fetch as i16)
        .unwrap();
    assert_eq!((fetch.min_version, fetch.max_version), (4, 17));
    assert!(response
        .api_keys
        .iter()
        .all(|k| k.api_key != ApiKey::CreateTopics as i16));

    // A version newer than ours: UNSUPPORTED_VERSION, the table in v0, and the connection stays usable.
    let mut header = RequestHeader::default();
    header.request_api_key = ApiKey::ApiVersions as i16;
    header.request_api_version = 99;
    header.correlation_id = 5;
    let mut body = BytesMut::new();
    header.encode(&mut body, 2).unwrap();
    body.extend_from_slice(&[0, 0, 0]);
    client.send_raw(&body).await.unwrap();
    let mut frame = client.receive().await.unwrap();
    assert_eq!(frame.get_i32(), 5);
    let v0 = ApiVersionsResponse::decode(&mut frame, 0).unwrap();
    assert_eq!(v0.error_code, 35);
    assert!(!v0.api_keys.is_empty());
    let again: ApiVersionsResponse = client
        .call(ApiKey::ApiVersions, 0, &ApiVersionsRequest::default())
        .await
        .unwrap();
    assert_eq!(again.error_code, 0);
}

#[tokio::test]
async fn metadata_names_this_endpoint_leader_and_unknown_topics_are_errors() {
    let addr = start(Fake::new(1), Limits::default()).await;
    let mut client = Client::connect(&addr).await;
    for version in [1, 9, 12] {
        let mut request = MetadataRequest::default();
        let mut asked = metadata_request::MetadataRequestTopic::default();
        asked.name = Some(TopicName(StrBytes::from_static_str("t")));
        let mut missing = metadata_request::MetadataRequestTopic::default();
        missing.name = Some(TopicName(StrBytes::from_static_str("nope")));
        request.topics = Some(vec![asked, missing]);
        let response: MetadataResponse = client.call(ApiKey::Metadata, version, &request).await.unwrap();
        assert_eq!(response.brokers.len(), 1);
        assert_eq!(response.brokers[0].port.to_string(), addr.rsplit(':').next().unwrap());
        let t = &response.topics[0];
        assert_eq!(t.error_code, 0);
        assert_eq!(t.partitions[0].leader_id, BrokerId(0));
        if version >= 7 {
            assert_eq!(t.partitions[0].leader_epoch, 3);
        }
        if version >= 10 {
            assert_eq!(t.topic_id, uuid::Uuid::from_bytes([7; 16]));
        }
        assert_eq!(response.topics[1].error_code, 3, "unknown topic");
    }
}

#[tokio::test]
async fn list_offsets_answers_latest_by_isolation_and_by_time() {
    let fake = Fake::new(4);
    *fake.last_stable.lock().unwrap() = 2;
    let addr = start(fake, Limits::default()).await;
    let mut client = Client::connect(&addr).await;
    for (isolation, expected) in [(0i8, 4i64), (1, 2)] {
        let mut p = ListOffsetsPartition::default();
        p.timestamp = -1;
        let mut by_time = ListOffsetsPartition::default();
        by_time.timestamp = 3000;
        let mut t = ListOffsetsTopic::default();
        t.name = TopicName(StrBytes::from_static_str("t"));
        t.partitions = vec![p, by_time];
        let mut request = ListOffsetsRequest::default();
        request.replica_id = BrokerId(-1);
        request.isolation_level = isolation;
        request.topics = vec![t];
        let response: ListOffsetsResponse = client.call(ApiKey::ListOffsets, 7, &request).await.unwrap();
        let parts = &response.topics[0].partitions;
        assert_eq!(parts[0].offset, expected);
        assert_eq!((parts[1].offset, parts[1].timestamp), (3, 3000));
    }
}

#[tokio::test]
async fn fetch_returns_the_bytes_up_to_the_isolation_bound() {
    let fake = Fake::new(5);
    *fake.last_stable.lock().unwrap() = 3;
    let addr = start(fake, Limits::default()).await;
    let mut client = Client::connect(&addr).await;
    let uncommitted: FetchResponse = client.call(ApiKey::Fetch, 12, &fetch_request(1, 0, 0)).await.unwrap();
    let p = &uncommitted.responses[0].partitions[0];
    assert_eq!(p.records.as_ref().unwrap().len(), 400);
    assert_eq!((p.high_watermark, p.last_stable_offset), (5, 3));
    assert!(p.aborted_transactions.is_none());
    let committed: FetchResponse = client.call(ApiKey::Fetch, 12, &fetch_request(1, 0, 1)).await.unwrap();
    let p = &committed.responses[0].partitions[0];
    assert_eq!(p.records.as_ref().unwrap().len(), 200);
    assert_eq!(p.aborted_transactions.as_ref().unwrap()[0].producer_id, ProducerId(9));
    // By topic id (v13+).
    let by_id: FetchResponse = client.call(ApiKey::Fetch, 16, &fetch_request(0, 0, 0)).await.unwrap();
    assert_eq!(by_id.responses[0].partitions[0].records.as_ref().unwrap().len(), 500);
    // Out of range.
    let out: FetchResponse = client.call(ApiKey::Fetch, 12, &fetch_request(9, 0, 0)).await.unwrap();
    assert_eq!(out.responses[0].partitions[0].error_code, 1);
}

#[tokio::test]
async fn a_fetch_at_the_end_waits_and_is_woken_by_new_data() {
    let fake = Fake::new(2);
    let addr = start(fake.clone(), Limits::default()).await;
    let mut client = Client::connect(&addr).await;
    let started = Instant::now();
    let appender = {
        let fake = fake.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            fake.append();
        })
    };
    let response: FetchResponse = client
        .call(ApiKey::Fetch, 12, &fetch_request(2, 5000, 0))
        .await
        .unwrap();
    let waited = started.elapsed();
    appender.await.unwrap();
    assert_eq!(response.responses[0].partitions[0].records.as_ref().unwrap().len(), 100);
    assert!(
        waited >= Duration::from_millis(150),
        "answered before the data came: {waited:?}"
    );
    assert!(waited < Duration::from_secs(4), "not woken by the new data: {waited:?}");
    // Nothing new: the wait ends at max_wait_ms with an empty answer.
    let started = Instant::now();
    let empty: FetchResponse = client.call(ApiKey::Fetch, 12, &fetch_request(3, 300, 0)).await.unwrap();
    assert!(empty.responses[0].partitions[0].records.as_ref().unwrap().is_empty());
    assert!(started.elapsed() >= Duration::from_millis(250));
}

#[tokio::test]
async fn produce_and_init_producer_id_are_refused_naming_the_link() {
    let addr = start(Fake::new(1), Limits::default()).await;
    let mut client = Client::connect(&addr).await;
    let mut data = PartitionProduceData::default();
    data.index = 0;
    data.records = Some(Bytes::from_static(b"not even a batch"));
    let mut topic = TopicProduceData::default();
    topic.name = TopicName(StrBytes::from_static_str("t"));
    topic.partition_data = vec![data];
    let mut request = ProduceRequest::default();
    request.acks = -1;
    request.timeout_ms = 1000;
    request.topic_data = vec![topic];
    let response: ProduceResponse = client.call(ApiKey::Produce, 9, &request).await.unwrap();
    let p = &response.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 44);
    assert!(p
        .error_message
        .as_ref()
        .unwrap()
        .contains("read-only mirror of link east"));
    let init: InitProducerIdResponse = client
        .call(ApiKey::InitProducerId, 4, &InitProducerIdRequest::default())
        .await
        .unwrap();
    assert_eq!(
        init.error_code, 0,
        "an idempotent producer gets an id: its sends are what is refused"
    );
}

#[tokio::test]
async fn hostile_frames_end_their_connection_only() {
    let limits = Limits {
        max_request_bytes: 1 << 20,
        ..Limits::default()
    };
    let addr = start(Fake::new(3), limits).await;
    // A frame declaring 2 GiB: closed before a body byte is read.
    let mut huge = Client::connect(&addr).await;
    huge.stream.write_all(&i32::MAX.to_be_bytes()).await.unwrap();
    assert!(huge.closed().await);
    // A negative size.
    let mut negative = Client::connect(&addr).await;
    negative.stream.write_all(&(-5i32).to_be_bytes()).await.unwrap();
    assert!(negative.closed().await);
    // An unknown api key.
    let mut unknown = Client::connect(&addr).await;
    unknown
        .send_raw(&[0x7f, 0x00, 0, 0, 0, 0, 0, 1, 0xff, 0xff])
        .await
        .unwrap();
    assert!(unknown.closed().await);
    // A known api not served (CreateTopics).
    let mut write = Client::connect(&addr).await;
    write.send_raw(&[0, 19, 0, 5, 0, 0, 0, 1, 0xff, 0xff, 0]).await.unwrap();
    assert!(write.closed().await);
    // A Metadata request whose topic array claims two billion entries in a few bytes.
    let mut liar = Client::connect(&addr).await;
    let mut header = RequestHeader::default();
    header.request_api_key = ApiKey::Metadata as i16;
    header.request_api_version = 4;
    header.correlation_id = 1;
    let mut body = BytesMut::new();
    header.encode(&mut body, 1).unwrap();
    body.extend_from_slice(&i32::MAX.to_be_bytes());
    body.extend_from_slice(&[0, 1, b'x']);
    liar.send_raw(&body).await.unwrap();
    assert!(liar.closed().await);
    // A truncated header.
    let mut short = Client::connect(&addr).await;
    short.send_raw(&[0, 3, 0]).await.unwrap();
    assert!(short.closed().await);
    // An honest client is served throughout.
    let mut honest = Client::connect(&addr).await;
    let response: FetchResponse = honest.call(ApiKey::Fetch, 12, &fetch_request(0, 0, 0)).await.unwrap();
    assert_eq!(response.responses[0].partitions[0].records.as_ref().unwrap().len(), 300);
}

#[tokio::test]
async fn connections_beyond_the_limit_are_closed_and_the_others_served() {
    let limits = Limits {
        max_connections: 3,
        ..Limits::default()
    };
    let addr = start(Fake::new(1), limits).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut c = Client::connect(&addr).await;
        let _: ApiVersionsResponse = c
            .call(ApiKey::ApiVersions, 0, &ApiVersionsRequest::default())
            .await
            .unwrap();
        held.push(c);
    }
    let mut extra = Client::connect(&addr).await;
    assert!(extra.closed().await, "a fourth connection was kept");
    drop(held.pop());
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut next = Client::connect(&addr).await;
    let r: ApiVersionsResponse = next
        .call(ApiKey::ApiVersions, 0, &ApiVersionsRequest::default())
        .await
        .unwrap();
    assert_eq!(r.error_code, 0);
}
