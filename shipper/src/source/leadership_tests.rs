//! Leadership from `Metadata`: the pure reading of an answer, the node id of a log dir, and the asking task
//! against a scripted broker (a real cluster: the `kafka_cluster` test of the tests crate and the cluster e2e).

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse, BrokerId, MetadataRequest, ResponseHeader, TopicName};
use kafka_protocol::protocol::{decode_request_header_from_buffer, Decodable, Encodable, StrBytes};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::source::list_offsets::read_frame;

fn config() -> ListOffsetsConfig {
    ListOffsetsConfig {
        interval: Duration::from_millis(10),
        request_timeout: Duration::from_millis(300),
        max_backoff: Duration::from_millis(50),
    }
}

fn partition(index: i32, leader: i32, epoch: i32, error_code: i16) -> MetadataResponsePartition {
    MetadataResponsePartition::default()
        .with_partition_index(index)
        .with_leader_id(BrokerId(leader))
        .with_leader_epoch(epoch)
        .with_error_code(error_code)
}

fn topic(name: &str, error_code: i16, partitions: Vec<MetadataResponsePartition>) -> MetadataResponseTopic {
    MetadataResponseTopic::default()
        .with_name(Some(TopicName(StrBytes::from_string(name.to_string()))))
        .with_error_code(error_code)
        .with_partitions(partitions)
}

fn broker(node: i32, host: &str, port: u16) -> MetadataResponseBroker {
    MetadataResponseBroker::default()
        .with_node_id(BrokerId(node))
        .with_host(StrBytes::from_string(host.to_string()))
        .with_port(i32::from(port))
}

fn answer(brokers: Vec<MetadataResponseBroker>, topics: Vec<MetadataResponseTopic>) -> MetadataResponse {
    MetadataResponse::default().with_brokers(brokers).with_topics(topics)
}

#[test]
fn led_partitions_are_those_this_node_leads_without_error() {
    let a = answer(
        vec![],
        vec![
            topic(
                "t",
                0,
                vec![
                    partition(0, 1, 5, 0),
                    partition(1, 2, 7, 0),
                    partition(2, 1, 3, 5),
                    partition(3, -1, 4, 0),
                ],
            ),
            // A topic answered with an error: nothing of it led.
            topic("u", 3, vec![partition(0, 1, 1, 0)]),
            topic("v", 0, vec![partition(4, 1, 0, 0)]),
        ],
    );
    let led = led_partitions(&a, 1);
    let mut got: Vec<_> = led.into_iter().collect();
    got.sort();
    assert_eq!(got, vec![(("t".to_string(), 0), 5), (("v".to_string(), 4), 0)]);
    assert_eq!(led_partitions(&a, 2).get(&("t".to_string(), 1)), Some(&7));
    assert!(led_partitions(&a, 3).is_empty());
}

#[test]
fn the_answering_node_is_found_by_its_advertised_address() {
    let peer: SocketAddr = "127.0.0.1:9093".parse().unwrap();
    let a = answer(
        vec![
            broker(1, "127.0.0.1", 9092),
            broker(2, "localhost", 9093),
            broker(3, "10.0.0.3", 9093),
        ],
        vec![],
    );
    let resolve = |addr: &str| -> Vec<SocketAddr> {
        match addr {
            "localhost:9093" => vec!["127.0.0.1:9093".parse().unwrap()],
            other => other.parse().into_iter().collect(),
        }
    };
    assert_eq!(answering_node(&a, peer, resolve), Ok(2));
    let err = answering_node(&a, "127.0.0.1:1".parse().unwrap(), resolve).unwrap_err();
    assert!(
        err.contains("node 1 at 127.0.0.1:9092") && err.contains("127.0.0.1:1"),
        "{err}"
    );
    let twice = answer(vec![broker(1, "127.0.0.1", 9093), broker(2, "localhost", 9093)], vec![]);
    let err = answering_node(&twice, peer, resolve).unwrap_err();
    assert!(err.contains("several nodes"), "{err}");
}

#[test]
fn node_id_comes_from_meta_properties_and_bad_ones_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let err = node_id_of_log_dir(dir.path()).unwrap_err().to_string();
    assert!(err.contains("meta.properties"), "{err}");
    let path = dir.path().join(META_PROPERTIES);
    std::fs::write(&path, "#\nversion=1\ncluster.id=abc\nnode.id=3\ndirectory.id=x\n").unwrap();
    assert_eq!(node_id_of_log_dir(dir.path()).unwrap(), 3);
    std::fs::write(&path, "version=1\ncluster.id=abc\n").unwrap();
    let err = node_id_of_log_dir(dir.path()).unwrap_err().to_string();
    assert!(err.contains("no node.id") && err.contains("meta.properties"), "{err}");
    std::fs::write(&path, "node.id=three\n").unwrap();
    let err = node_id_of_log_dir(dir.path()).unwrap_err().to_string();
    assert!(err.contains("\"three\""), "{err}");
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

/// A broker that answers `ApiVersions`, then one `Metadata` per script entry (its brokers list naming this
/// listener as node `me`), then closes the connection and refuses every later one.
async fn scripted_broker(l: TcpListener, me: i32, script: Vec<Vec<MetadataResponseTopic>>) {
    let port = l.local_addr().unwrap().port();
    let (mut s, _) = l.accept().await.unwrap();
    drop(l);
    let mut script = script.into_iter();
    while let Ok(mut body) = read_frame(&mut s).await {
        let header = decode_request_header_from_buffer(&mut body).unwrap();
        let (key, version, id) = (
            header.request_api_key,
            header.request_api_version,
            header.correlation_id,
        );
        if key == ApiKey::ApiVersions as i16 {
            let versions = ApiVersionsResponse::default().with_api_keys(vec![
                ApiVersion::default()
                    .with_api_key(ApiKey::ListOffsets as i16)
                    .with_min_version(1)
                    .with_max_version(7),
                ApiVersion::default()
                    .with_api_key(ApiKey::Metadata as i16)
                    .with_min_version(0)
                    .with_max_version(12),
            ]);
            respond(&mut s, ApiKey::ApiVersions, version, id, &versions).await;
            continue;
        }
        assert_eq!(key, ApiKey::Metadata as i16);
        assert_eq!(version, 12, "the highest version both sides speak");
        let request = MetadataRequest::decode(&mut body, version).unwrap();
        assert_eq!(request.topics, None, "all topics");
        assert!(!request.allow_auto_topic_creation);
        let Some(topics) = script.next() else { return };
        let brokers = vec![broker(7, "127.0.0.1", 1), broker(me, "127.0.0.1", port)];
        respond(&mut s, ApiKey::Metadata, version, id, &answer(brokers, topics)).await;
    }
}

async fn listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    (l, addr)
}

#[tokio::test]
async fn leadership_follows_the_answers_and_expires_when_the_broker_is_gone() {
    let (l, addr) = listener().await;
    let script = vec![
        vec![topic("t", 0, vec![partition(0, 1, 5, 0), partition(1, 2, 7, 0)])],
        // The same: no news.
        vec![topic("t", 0, vec![partition(0, 1, 5, 0), partition(1, 2, 7, 0)])],
        // t-0 moves to node 2 at epoch 6; t-1 comes to us at epoch 8.
        vec![topic("t", 0, vec![partition(0, 2, 6, 0), partition(1, 1, 8, 0)])],
    ];
    let broker = tokio::spawn(scripted_broker(l, 1, script));
    let source = MetadataLeadership::spawn(
        &tokio::runtime::Handle::current(),
        addr.clone(),
        1,
        Duration::from_millis(10),
        config(),
    )
    // Long enough to read the last answer below on a loaded machine, short enough to see it expire.
    .with_max_age(Duration::from_secs(2));
    let changes = source.changes().expect("a Metadata source reports its changes");
    assert_eq!(source.node_id(), 1);
    broker.await.unwrap();
    while source.last_error().is_none() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(source.answers(), 3);
    // Two moves: nothing -> first view, first view -> the moved one.
    assert_eq!(*changes.borrow(), 2);
    // The broker is gone: the last answer stays in force for a while...
    assert_eq!(source.led_epoch("t", 0), None);
    assert_eq!(source.led_epoch("t", 1), Some(8));
    assert_eq!(source.led_epoch("u", 0), None);
    let err = source.last_error().unwrap();
    assert!(err.contains(&addr), "{err}");
    // ...and then nothing is led: leadership is never assumed from an old answer.
    while source.led_epoch("t", 1).is_some() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(source.answers(), 3);
}

#[tokio::test]
async fn a_bootstrap_that_does_not_answer_is_unreachable_not_refused() {
    // A port nothing listens on (bound, then closed): a shipper restarted beside a broker that is still down.
    let (l, addr) = listener().await;
    drop(l);
    match check_node(&addr, 1, Duration::from_secs(5)).await.unwrap() {
        NodeCheck::Unreachable { reason } => assert!(reason.contains(&addr), "{reason}"),
        other => panic!("{other:?}"),
    }
    // The same node answering: confirmed.
    let (l, addr) = listener().await;
    let broker = tokio::spawn(scripted_broker(
        l,
        1,
        vec![vec![topic("t", 0, vec![partition(0, 1, 5, 0)])]],
    ));
    assert_eq!(
        check_node(&addr, 1, Duration::from_secs(5)).await.unwrap(),
        NodeCheck::Confirmed
    );
    broker.abort();
}

#[tokio::test]
async fn a_bootstrap_of_another_node_is_refused_naming_both() {
    let (l, addr) = listener().await;
    let broker = tokio::spawn(scripted_broker(
        l,
        2,
        vec![vec![topic("t", 0, vec![partition(0, 1, 5, 0)])]],
    ));
    let err = check_node(&addr, 1, Duration::from_secs(5))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("is node 2") && err.contains("node 1") && err.contains(&addr),
        "{err}"
    );
    broker.abort();

    // The asking task refuses every answer of that node too: node 1's partitions are never led.
    let (l, addr) = listener().await;
    let broker = tokio::spawn(scripted_broker(
        l,
        2,
        vec![vec![topic("t", 0, vec![partition(0, 1, 5, 0)])]],
    ));
    let source = MetadataLeadership::spawn(
        &tokio::runtime::Handle::current(),
        addr,
        1,
        Duration::from_millis(10),
        config(),
    );
    while source.last_error().is_none() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(source.last_error().unwrap().contains("is node 2"));
    assert_eq!(source.led_epoch("t", 0), None);
    assert_eq!(source.answers(), 0);
    broker.abort();
}
