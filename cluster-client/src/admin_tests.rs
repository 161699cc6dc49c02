//! The admin client against a scripted broker: what an offset commit puts on the wire (no leader epoch, no member),
//! a coordinator still loading asked again, and a refusal named with broker, API, resource and Kafka's error name.
//! (Real brokers: `tests/tests/e2e_failover_target.rs`.)

use std::sync::{Arc, Mutex};

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::offset_commit_response::{OffsetCommitResponsePartition, OffsetCommitResponseTopic};
use kafka_protocol::messages::offset_fetch_response::{OffsetFetchResponsePartition, OffsetFetchResponseTopic};
use kafka_protocol::messages::{ApiVersionsResponse, BrokerId, ResponseHeader};
use kafka_protocol::protocol::{decode_request_header_from_buffer, Decodable, Encodable};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::connection::read_frame;

const TIMEOUT: Duration = Duration::from_secs(5);

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

/// What the scripted broker saw.
#[derive(Default)]
struct Seen {
    commits: Vec<OffsetCommitRequest>,
}

/// One connection of the scripted broker: a coordinator (itself) that answers the first commit with
/// `COORDINATOR_LOAD_IN_PROGRESS`, refuses to describe group `denied`, and returns what was committed.
async fn serve(mut s: TcpStream, port: u16, seen: Arc<Mutex<Seen>>) {
    while let Ok(mut body) = read_frame(&mut s).await {
        let header = decode_request_header_from_buffer(&mut body).unwrap();
        let (key, version, id) = (
            ApiKey::try_from(header.request_api_key).unwrap(),
            header.request_api_version,
            header.correlation_id,
        );
        match key {
            ApiKey::ApiVersions => {
                let offer = |k: ApiKey, max: i16| {
                    ApiVersion::default()
                        .with_api_key(k as i16)
                        .with_min_version(0)
                        .with_max_version(max)
                };
                let response = ApiVersionsResponse::default().with_api_keys(vec![
                    offer(ApiKey::ApiVersions, 3),
                    offer(ApiKey::FindCoordinator, 6),
                    offer(ApiKey::DescribeGroups, 5),
                    offer(ApiKey::OffsetCommit, 9),
                    offer(ApiKey::OffsetFetch, 9),
                ]);
                respond(&mut s, key, version, id, &response).await;
            }
            ApiKey::FindCoordinator => {
                let response = FindCoordinatorResponse::default()
                    .with_node_id(BrokerId(1))
                    .with_host(StrBytes::from_static_str("127.0.0.1"))
                    .with_port(i32::from(port));
                respond(&mut s, key, version, id, &response).await;
            }
            ApiKey::DescribeGroups => {
                let request = DescribeGroupsRequest::decode(&mut body, version).unwrap();
                let group = request.groups[0].clone();
                let described = if group.0.as_str() == "denied" {
                    DescribedGroup::default().with_group_id(group).with_error_code(30)
                } else {
                    DescribedGroup::default()
                        .with_group_id(group)
                        .with_group_state(StrBytes::from_static_str("Empty"))
                };
                let response = DescribeGroupsResponse::default().with_groups(vec![described]);
                respond(&mut s, key, version, id, &response).await;
            }
            ApiKey::OffsetCommit => {
                let request = OffsetCommitRequest::decode(&mut body, version).unwrap();
                let first = {
                    let mut seen = seen.lock().unwrap();
                    seen.commits.push(request.clone());
                    seen.commits.len() == 1
                };
                let code = if first { COORDINATOR_LOAD_IN_PROGRESS } else { 0 };
                let topics = request
                    .topics
                    .iter()
                    .map(|t| {
                        OffsetCommitResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        OffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
                respond(
                    &mut s,
                    key,
                    version,
                    id,
                    &OffsetCommitResponse::default().with_topics(topics),
                )
                .await;
            }
            ApiKey::OffsetFetch => {
                let last = seen.lock().unwrap().commits.last().cloned().unwrap();
                let topics = last
                    .topics
                    .iter()
                    .map(|t| {
                        OffsetFetchResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        OffsetFetchResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_committed_offset(p.committed_offset)
                                            .with_committed_leader_epoch(p.committed_leader_epoch)
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
                respond(
                    &mut s,
                    key,
                    version,
                    id,
                    &OffsetFetchResponse::default().with_topics(topics),
                )
                .await;
            }
            other => panic!("unexpected request {other:?}"),
        }
    }
}

async fn scripted_broker() -> (String, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let shared = seen.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            tokio::spawn(serve(s, port, shared.clone()));
        }
    });
    (format!("127.0.0.1:{port}"), seen)
}

#[tokio::test]
async fn offsets_are_committed_without_member_or_leader_epoch_and_a_loading_coordinator_is_asked_again() {
    let (addr, seen) = scripted_broker().await;
    let mut admin = AdminClient::connect(&addr, TIMEOUT).await.unwrap();
    let state = admin.group_state("g").await.unwrap();
    assert_eq!(
        (state.state.as_str(), state.members, state.accepts_simple_commit()),
        ("Empty", 0, true)
    );
    let offsets = [
        OffsetToCommit {
            topic: "orders".into(),
            partition: 0,
            offset: 25,
            metadata: "m".into(),
        },
        OffsetToCommit {
            topic: "orders".into(),
            partition: 1,
            offset: 40,
            metadata: String::new(),
        },
    ];
    let answers = admin.commit_offsets("g", &offsets).await.unwrap();
    assert_eq!(
        answers,
        [(("orders".to_string(), 0), 0), (("orders".to_string(), 1), 0)]
    );
    let commits = std::mem::take(&mut seen.lock().unwrap().commits);
    assert_eq!(
        commits.len(),
        2,
        "the commit answered COORDINATOR_LOAD_IN_PROGRESS is sent again"
    );
    let sent = &commits[1];
    assert_eq!(sent.generation_id_or_member_epoch, -1);
    assert_eq!(sent.member_id.as_str(), "");
    let partitions: Vec<(i32, i64, i32)> = sent.topics[0]
        .partitions
        .iter()
        .map(|p| (p.partition_index, p.committed_offset, p.committed_leader_epoch))
        .collect();
    assert_eq!(partitions, [(0, 25, -1), (1, 40, -1)]);
    seen.lock().unwrap().commits = commits;
    let fetched = admin
        .fetch_offsets("g", &[("orders".into(), 0), ("orders".into(), 1)])
        .await
        .unwrap();
    assert_eq!(
        fetched[&("orders".to_string(), 1)],
        FetchedOffset {
            offset: 40,
            leader_epoch: -1
        }
    );
}

#[test]
fn only_an_empty_or_unknown_group_takes_a_memberless_commit() {
    let state = |state: &str, members| GroupState {
        state: state.into(),
        members,
        kind: "classic",
    };
    assert!(state("Empty", 0).accepts_simple_commit());
    assert!(state("Dead", 0).accepts_simple_commit());
    assert!(!state("Stable", 1).accepts_simple_commit());
    assert!(
        !state("PreparingRebalance", 0).accepts_simple_commit(),
        "a state with members, none listed"
    );
}

#[tokio::test]
async fn a_refusal_names_the_broker_the_api_the_group_and_the_error() {
    let (addr, _) = scripted_broker().await;
    let mut admin = AdminClient::connect(&addr, TIMEOUT).await.unwrap();
    let e = admin.group_state("denied").await.unwrap_err();
    assert_eq!(e.code(), Some(30));
    let text = e.to_string();
    for part in [
        addr.as_str(),
        "DescribeGroups",
        "group denied",
        "GroupAuthorizationFailed (30)",
    ] {
        assert!(text.contains(part), "{text}");
    }
}
