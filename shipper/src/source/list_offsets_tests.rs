//! The `ListOffsets` client against peers that fail: a closed port, a peer
//! speaking another protocol, a silent one, and a scripted broker whose
//! answers carry per-partition error codes. (A real broker: the
//! `source_hw` test of the tests crate.)

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::{ApiVersionsResponse, ListOffsetsRequest, ListOffsetsResponse};

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::ResponseHeader;
use kafka_protocol::protocol::decode_request_header_from_buffer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::super::bound_hw::HighWatermarkSource;
use super::super::fetch_hw::{FetchHighWatermarks, FetchHwConfig};
use super::*;

/// A timeout short enough for tests that expect one, long enough for loopback.
const TEST_TIMEOUT: Duration = Duration::from_millis(300);

fn config() -> ListOffsetsConfig {
    ListOffsetsConfig {
        interval: Duration::from_millis(10),
        request_timeout: TEST_TIMEOUT,
        max_backoff: Duration::from_millis(50),
    }
}

async fn listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    (l, addr)
}

#[tokio::test]
async fn a_closed_port_is_a_clear_connect_error() {
    let (l, addr) = listener().await;
    drop(l);
    let err = BrokerClient::connect(&addr, TEST_TIMEOUT).await.err().unwrap();
    let msg = err.to_string();
    assert!(msg.contains(&addr) && msg.contains("cannot connect"), "{msg}");
}

#[tokio::test]
async fn a_peer_speaking_another_protocol_is_refused_by_its_size_prefix() {
    let (l, addr) = listener().await;
    let peer = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = [0u8; 256];
        let _ = s.read(&mut buf).await;
        s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            .await
            .unwrap();
        // Hold the connection open: the client must not wait for 1.2 GB.
        tokio::time::sleep(Duration::from_secs(2)).await;
    });
    let err = BrokerClient::connect(&addr, TEST_TIMEOUT).await.err().unwrap();
    let msg = err.to_string();
    assert!(msg.contains("not a Kafka broker") && msg.contains(&addr), "{msg}");
    assert!(
        msg.contains(&(u32::from_be_bytes(*b"HTTP") as i32).to_string()),
        "{msg}"
    );
    peer.abort();
}

#[tokio::test]
async fn a_small_frame_with_the_wrong_correlation_id_is_refused() {
    let (l, addr) = listener().await;
    let peer = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = [0u8; 256];
        let _ = s.read(&mut buf).await;
        // A well-sized frame of garbage: 8 bytes, correlation id -7.
        s.write_all(&[0, 0, 0, 8, 0xff, 0xff, 0xff, 0xf9, 1, 2, 3, 4])
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
    });
    let err = BrokerClient::connect(&addr, TEST_TIMEOUT).await.err().unwrap();
    let msg = err.to_string();
    assert!(msg.contains("correlation id -7"), "{msg}");
    peer.abort();
}

#[tokio::test]
async fn a_silent_peer_times_out() {
    let (l, addr) = listener().await;
    let peer = tokio::spawn(async move {
        let (_s, _) = l.accept().await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await;
    });
    let err = BrokerClient::connect(&addr, TEST_TIMEOUT).await.err().unwrap();
    let msg = err.to_string();
    assert!(msg.contains("no ApiVersions response within"), "{msg}");
    peer.abort();
}

#[tokio::test]
async fn a_peer_closing_mid_response_is_an_error() {
    let (l, addr) = listener().await;
    let peer = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = [0u8; 256];
        let _ = s.read(&mut buf).await;
        s.write_all(&[0, 0, 1, 0, 0, 0]).await.unwrap();
    });
    let err = BrokerClient::connect(&addr, TEST_TIMEOUT).await.err().unwrap();
    let msg = err.to_string();
    assert!(msg.contains("256-byte response cut short"), "{msg}");
    peer.abort();
}

/// One request read by the scripted broker: (api key, version, correlation id, body).
async fn read_request(s: &mut TcpStream) -> Option<(i16, i16, i32, bytes::Bytes)> {
    let mut body = read_frame(s).await.ok()?;
    let header = decode_request_header_from_buffer(&mut body).ok()?;
    Some((
        header.request_api_key,
        header.request_api_version,
        header.correlation_id,
        body,
    ))
}

async fn respond<M: Encodable>(s: &mut TcpStream, key: ApiKey, version: i16, correlation_id: i32, body: &M) {
    let mut out = BytesMut::new();
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut out, key.response_header_version(version))
        .unwrap();
    body.encode(&mut out, version).unwrap();
    let mut frame = BytesMut::new();
    frame.put_u32(out.len() as u32);
    frame.extend_from_slice(&out);
    s.write_all(&frame).await.unwrap();
}

fn answer(partition: i32, error_code: i16, offset: i64) -> ListOffsetsPartitionResponse {
    ListOffsetsPartitionResponse::default()
        .with_partition_index(partition)
        .with_error_code(error_code)
        .with_offset(offset)
}

/// A broker that answers `ApiVersions`, then one `ListOffsets` per script
/// entry, then closes the connection and refuses every later one.
async fn scripted_broker(l: TcpListener, script: Vec<Vec<ListOffsetsPartitionResponse>>) {
    let (mut s, _) = l.accept().await.unwrap();
    drop(l);
    let mut script = script.into_iter();
    while let Some((key, version, correlation_id, mut body)) = read_request(&mut s).await {
        if key == ApiKey::ApiVersions as i16 {
            let versions = ApiVersionsResponse::default().with_api_keys(vec![ApiVersion::default()
                .with_api_key(ApiKey::ListOffsets as i16)
                .with_min_version(1)
                .with_max_version(7)]);
            respond(&mut s, ApiKey::ApiVersions, version, correlation_id, &versions).await;
            continue;
        }
        assert_eq!(key, ApiKey::ListOffsets as i16);
        assert_eq!(version, 7, "the highest version both sides speak");
        let request = ListOffsetsRequest::decode(&mut body, version).unwrap();
        assert_eq!(request.isolation_level, READ_UNCOMMITTED);
        assert_eq!(request.replica_id, BrokerId(CONSUMER_REPLICA_ID));
        assert!(request.topics[0]
            .partitions
            .iter()
            .all(|p| p.timestamp == LATEST_TIMESTAMP));
        let Some(partitions) = script.next() else { return };
        let response = ListOffsetsResponse::default().with_topics(vec![ListOffsetsTopicResponse::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(partitions)]);
        respond(&mut s, ApiKey::ListOffsets, version, correlation_id, &response).await;
    }
}

/// The high-watermark source over a broker that speaks no `Fetch` (the scripted one): it polls `ListOffsets`.
fn polling() -> FetchHwConfig {
    FetchHwConfig {
        list_offsets: config(),
        ..FetchHwConfig::default()
    }
}

#[tokio::test]
async fn errors_keep_the_last_known_high_watermark_and_unanswered_partitions_stay_unknown() {
    let (l, addr) = listener().await;
    let script = vec![
        // t-0 known; t-1 led elsewhere; t-2 not in the answer.
        vec![answer(0, 0, 42), answer(1, 6, -1)],
        // t-0 moves on.
        vec![answer(0, 0, 50), answer(1, 6, -1)],
        // t-0 answers an error now: 50 stays.
        vec![answer(0, 6, -1), answer(1, 0, 9)],
    ];
    let broker = tokio::spawn(scripted_broker(l, script));
    let parts = vec![("t".to_string(), 0), ("t".to_string(), 1), ("t".to_string(), 2)];
    let source = FetchHighWatermarks::spawn(&tokio::runtime::Handle::current(), addr.clone(), parts, polling());
    // The broker closes after its script: wait for the failure that follows.
    broker.await.unwrap();
    while source.last_error().is_none() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(source.list_answers(), 3);
    assert_eq!(source.high_watermark("t", 0).map(|h| h.offset), Some(50));
    assert_eq!(source.high_watermark("t", 1).map(|h| h.offset), Some(9));
    assert_eq!(source.high_watermark("t", 2), None);
    assert_eq!(source.high_watermark("u", 0), None);
    let err = source.last_error().unwrap();
    assert!(err.contains(&addr), "{err}");
    // The port is closed now: the source keeps dialling, and the values stay.
    while !source.last_error().unwrap_or_default().contains("cannot connect") {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(source.list_answers(), 3);
    assert_eq!(source.high_watermark("t", 0).map(|h| h.offset), Some(50));
}

#[test]
fn error_codes_are_named() {
    assert_eq!(error_name(6), "NotLeaderOrFollower (6)");
    assert_eq!(error_name(-999), "error code -999");
}

#[tokio::test]
async fn changes_move_only_when_a_high_watermark_moves() {
    let (l, addr) = listener().await;
    let script = vec![
        vec![answer(0, 0, 42)],
        // The same answer: no news for the feed.
        vec![answer(0, 0, 42)],
        vec![answer(0, 0, 50)],
        // An error keeps 50: no news either.
        vec![answer(0, 6, -1)],
    ];
    let broker = tokio::spawn(scripted_broker(l, script));
    let source = FetchHighWatermarks::spawn(
        &tokio::runtime::Handle::current(),
        addr,
        vec![("t".to_string(), 0)],
        polling(),
    );
    let changes = source.changes().expect("the source reports its changes");
    broker.await.unwrap();
    while source.last_error().is_none() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(source.list_answers(), 4);
    // Two moves: unknown -> 42, 42 -> 50.
    assert_eq!(*changes.borrow(), 2);
}
