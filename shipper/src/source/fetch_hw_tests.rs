//! The long-polling `Fetch` source against scripted brokers: what it asks (where each fetch parks, the sizes), what
//! it takes as the bound (errors, negative values, lower values, stray partitions), and its fallbacks (no usable
//! `Fetch` version, a fetch that fails, a broker that answers at once). (A real broker: the `fetch_hw` test of the
//! tests crate.)

use std::sync::Mutex;

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::fetch_response::FetchableTopicResponse;
use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::{ApiVersionsResponse, ListOffsetsRequest, ListOffsetsResponse, ResponseHeader};
use kafka_protocol::protocol::{decode_request_header_from_buffer, Decodable, Encodable};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

use super::super::list_offsets::read_frame;
use super::*;

const TEST_TIMEOUT: Duration = Duration::from_millis(500);
const T: &str = "t";

fn config() -> FetchHwConfig {
    FetchHwConfig {
        max_wait: Duration::from_millis(100),
        fetch_retry: Duration::from_millis(150),
        partitions_per_second: FETCH_PARTITIONS_PER_SECOND,
        max_fetch_retry: Duration::from_millis(300),
        list_offsets: ListOffsetsConfig {
            interval: Duration::from_millis(10),
            request_timeout: TEST_TIMEOUT,
            max_backoff: Duration::from_millis(50),
        },
    }
}

/// One step of a scripted broker: the answer to the next request, which must be of that kind.
enum Step {
    /// `ListOffsets`: (partition, error code, offset) of topic `t`.
    List(Vec<(i32, i16, i64)>),
    /// The same answer to every `ListOffsets` until a `Fetch` comes (a source polling for a while).
    ListRepeated(Vec<(i32, i16, i64)>),
    /// `Fetch`: (topic, partition, error code, high watermark), after a delay.
    Fetch(Vec<(&'static str, i32, i16, i64)>, Duration),
    /// A `Fetch` answered with a response-level error code.
    FetchRefused(i16),
    /// This many `Fetch`es answered at once, each partition's high watermark one past its fetch offset.
    FetchAdvancing(usize),
}

/// What the scripted broker was asked.
#[derive(Debug, Clone, PartialEq)]
enum Asked {
    /// `ListOffsets` of these partitions of `t`.
    List(Vec<i32>),
    /// `Fetch` (version, (topic, partition, offset, partition max bytes) each, max bytes, min bytes, max wait ms,
    /// session id, session epoch, isolation level).
    Fetch {
        version: i16,
        partitions: Vec<(String, i32, i64, i32)>,
        max_bytes: i32,
        min_bytes: i32,
        max_wait_ms: i32,
        session: (i32, i32),
        isolation_level: i8,
    },
}

async fn listener() -> (TcpListener, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    (l, addr)
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

/// A broker offering `Fetch` versions `fetch` (none: not offered) that answers its first connection by the first
/// script, the next by the second..., records what it was asked in `asked`, and closes each connection after its
/// script (or at a request of the wrong kind), then its port after the last.
async fn scripted_broker(
    l: TcpListener,
    fetch: Option<(i16, i16)>,
    scripts: Vec<Vec<Step>>,
    asked: Arc<Mutex<Vec<Asked>>>,
) {
    for script in scripts {
        let (s, _) = l.accept().await.unwrap();
        serve(s, fetch, script, asked.clone()).await;
    }
}

async fn serve(mut s: TcpStream, fetch: Option<(i16, i16)>, script: Vec<Step>, asked: Arc<Mutex<Vec<Asked>>>) {
    let mut script = std::collections::VecDeque::from(script);
    loop {
        let Ok(mut body) = read_frame(&mut s).await else { return };
        let header = decode_request_header_from_buffer(&mut body).unwrap();
        let (key, version, correlation_id) = (
            header.request_api_key,
            header.request_api_version,
            header.correlation_id,
        );
        if key == ApiKey::ApiVersions as i16 {
            let mut keys = vec![ApiVersion::default()
                .with_api_key(ApiKey::ListOffsets as i16)
                .with_min_version(1)
                .with_max_version(7)];
            if let Some((min, max)) = fetch {
                keys.push(
                    ApiVersion::default()
                        .with_api_key(ApiKey::Fetch as i16)
                        .with_min_version(min)
                        .with_max_version(max),
                );
            }
            let versions = ApiVersionsResponse::default().with_api_keys(keys);
            respond(&mut s, ApiKey::ApiVersions, version, correlation_id, &versions).await;
            continue;
        }
        if key == ApiKey::ListOffsets as i16 {
            let request = ListOffsetsRequest::decode(&mut body, version).unwrap();
            let parts = request
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.partition_index))
                .collect();
            asked.lock().unwrap().push(Asked::List(parts));
            let answers = match script.front() {
                Some(Step::ListRepeated(answers)) => answers.clone(),
                Some(Step::List(_)) => match script.pop_front() {
                    Some(Step::List(answers)) => answers,
                    _ => return,
                },
                _ => return,
            };
            let partitions = answers
                .into_iter()
                .map(|(p, e, o)| {
                    ListOffsetsPartitionResponse::default()
                        .with_partition_index(p)
                        .with_error_code(e)
                        .with_offset(o)
                })
                .collect();
            let response = ListOffsetsResponse::default().with_topics(vec![ListOffsetsTopicResponse::default()
                .with_name(TopicName(StrBytes::from_static_str(T)))
                .with_partitions(partitions)]);
            respond(&mut s, ApiKey::ListOffsets, version, correlation_id, &response).await;
            continue;
        }
        assert_eq!(key, ApiKey::Fetch as i16);
        let request = FetchRequest::decode(&mut body, version).unwrap();
        asked.lock().unwrap().push(Asked::Fetch {
            version,
            partitions: request
                .topics
                .iter()
                .flat_map(|t| {
                    t.partitions.iter().map(|p| {
                        (
                            t.topic.0.to_string(),
                            p.partition,
                            p.fetch_offset,
                            p.partition_max_bytes,
                        )
                    })
                })
                .collect(),
            max_bytes: request.max_bytes,
            min_bytes: request.min_bytes,
            max_wait_ms: request.max_wait_ms,
            session: (request.session_id, request.session_epoch),
            isolation_level: request.isolation_level,
        });
        if matches!(script.front(), Some(Step::ListRepeated(_))) {
            script.pop_front();
        }
        if let Some(Step::FetchAdvancing(n)) = script.front_mut() {
            *n -= 1;
            let partitions = request.topics[0]
                .partitions
                .iter()
                .map(|p| {
                    PartitionData::default()
                        .with_partition_index(p.partition)
                        .with_high_watermark(p.fetch_offset + 1)
                })
                .collect();
            let response = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
                .with_topic(TopicName(StrBytes::from_static_str(T)))
                .with_partitions(partitions)]);
            if *n == 0 {
                script.pop_front();
            }
            respond(&mut s, ApiKey::Fetch, version, correlation_id, &response).await;
            continue;
        }
        let response = match script.pop_front() {
            Some(Step::Fetch(answers, delay)) => {
                tokio::time::sleep(delay).await;
                let mut topics: Vec<FetchableTopicResponse> = Vec::new();
                for (topic, p, e, hw) in answers {
                    // Records the source must drop unread.
                    let data = PartitionData::default()
                        .with_partition_index(p)
                        .with_error_code(e)
                        .with_high_watermark(hw)
                        .with_records(Some(bytes::Bytes::from_static(b"not a record batch")));
                    match topics.last_mut() {
                        Some(t) if t.topic.0.as_str() == topic => t.partitions.push(data),
                        _ => topics.push(
                            FetchableTopicResponse::default()
                                .with_topic(TopicName(StrBytes::from_static_str(topic)))
                                .with_partitions(vec![data]),
                        ),
                    }
                }
                FetchResponse::default().with_responses(topics)
            }
            Some(Step::FetchRefused(code)) => FetchResponse::default().with_error_code(code),
            _ => return,
        };
        respond(&mut s, ApiKey::Fetch, version, correlation_id, &response).await;
    }
}

fn spawn(addr: String, partitions: &[i32]) -> FetchHighWatermarks {
    let parts = partitions.iter().map(|p| (T.to_string(), *p)).collect();
    FetchHighWatermarks::spawn(&tokio::runtime::Handle::current(), addr, parts, config())
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn hw(source: &FetchHighWatermarks, partition: i32) -> Option<i64> {
    source.high_watermark(T, partition).map(|h| h.offset)
}

const NOW: Duration = Duration::ZERO;

#[tokio::test]
async fn learns_by_list_offsets_then_parks_a_fetch_at_each_high_watermark_and_takes_its_answers() {
    let (l, addr) = listener().await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let script = vec![
        Step::List(vec![(0, 0, 42), (1, 0, 7)]),
        // The broker answers when t-0's high watermark moves; t-1's unchanged. A partition not asked for and a
        // second answer for t-0 are ignored.
        Step::Fetch(
            vec![
                (T, 0, 0, 50),
                (T, 0, 0, 999),
                (T, 1, 0, 7),
                (T, 5, 0, 999),
                ("u", 0, 0, 999),
            ],
            NOW,
        ),
        // A lower high watermark is taken as it is (a new leader that has not caught up: it ships less).
        Step::Fetch(vec![(T, 0, 0, 48), (T, 1, 0, 9)], NOW),
    ];
    let broker = tokio::spawn(scripted_broker(l, Some((4, 17)), vec![script], asked.clone()));
    let source = spawn(addr, &[0, 1]);
    let changes = source.changes().expect("the fetch source reports its changes");
    broker.await.unwrap();
    until("the failure after the script", || source.last_error().is_some()).await;
    assert_eq!((source.list_answers(), source.fetch_answers()), (1, 2));
    assert_eq!((hw(&source, 0), hw(&source, 1)), (Some(48), Some(9)));
    assert_eq!(source.high_watermark("u", 0), None);
    assert_eq!(source.high_watermark(T, 5), None);
    // unknown -> (42, 7) -> (50, 7) -> (48, 9): three moves.
    assert_eq!(*changes.borrow(), 3);
    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked[0], Asked::List(vec![0, 1]));
    let fetch = |offsets: [i64; 2]| Asked::Fetch {
        version: MAX_FETCH_VERSION,
        partitions: vec![(T.to_string(), 0, offsets[0], 1), (T.to_string(), 1, offsets[1], 1)],
        max_bytes: 1,
        min_bytes: 1,
        max_wait_ms: 100,
        session: (0, -1),
        isolation_level: 0,
    };
    // Each fetch parks at the last high watermark answered.
    assert_eq!(asked[1..4], [fetch([42, 7]), fetch([50, 7]), fetch([48, 9])]);
}

#[tokio::test]
async fn a_partition_error_or_a_negative_high_watermark_keeps_the_last_bound_and_is_relearned_by_list_offsets() {
    let (l, addr) = listener().await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let script = vec![
        // t-2 answers an error: not fetched until ListOffsets learns it.
        Step::List(vec![(0, 0, 10), (1, 0, 20), (2, 6, -1)]),
        // t-0 moved off this broker; t-1 answers a negative high watermark; t-2 is not fetched.
        Step::Fetch(vec![(T, 0, 6, -1), (T, 1, 0, -5)], NOW),
        // Some partition waits to be learned: ListOffsets again for those three.
        Step::List(vec![(0, 0, 11), (1, 0, 21), (2, 0, 30)]),
        Step::Fetch(vec![(T, 0, 0, 11), (T, 1, 0, 21), (T, 2, 0, 31)], NOW),
    ];
    let broker = tokio::spawn(scripted_broker(l, Some((4, 12)), vec![script], asked.clone()));
    let source = spawn(addr, &[0, 1, 2]);
    until("the first fetch answer", || source.fetch_answers() >= 1).await;
    broker.await.unwrap();
    until("the failure after the script", || source.last_error().is_some()).await;
    let asked = asked.lock().unwrap().clone();
    let Asked::Fetch {
        partitions,
        max_wait_ms,
        ..
    } = &asked[1]
    else {
        panic!("{asked:?}")
    };
    let parked: Vec<_> = partitions.iter().map(|(_, p, o, _)| (*p, *o)).collect();
    assert_eq!(parked, [(0, 10), (1, 20)], "t-2, unknown, is not fetched");
    assert_eq!(
        *max_wait_ms, 10,
        "parked for one ListOffsets interval while a partition waits"
    );
    assert_eq!(asked[2], Asked::List(vec![0, 1, 2]));
    let Asked::Fetch {
        partitions,
        max_wait_ms,
        ..
    } = &asked[3]
    else {
        panic!("{asked:?}")
    };
    assert_eq!(partitions.len(), 3);
    assert_eq!(*max_wait_ms, 100, "every partition parked: the full wait");
    assert_eq!(
        (hw(&source, 0), hw(&source, 1), hw(&source, 2)),
        (Some(11), Some(21), Some(31))
    );
}

#[tokio::test]
async fn the_errors_keep_the_bound_in_force_until_answered() {
    let (l, addr) = listener().await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    // The script stops after the erroneous fetch answer: whatever the source holds then is what it took from it.
    let script = vec![
        Step::List(vec![(0, 0, 10), (1, 0, 20)]),
        Step::Fetch(vec![(T, 0, 6, -1), (T, 1, 0, -5)], NOW),
    ];
    let broker = tokio::spawn(scripted_broker(l, Some((4, 12)), vec![script], asked));
    let source = spawn(addr, &[0, 1]);
    broker.await.unwrap();
    until("the failure after the script", || source.last_error().is_some()).await;
    assert_eq!(source.fetch_answers(), 1);
    assert_eq!((hw(&source, 0), hw(&source, 1)), (Some(10), Some(20)));
}

#[tokio::test]
async fn a_broker_without_a_named_fetch_version_is_polled_with_list_offsets() {
    let (l, addr) = listener().await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let script = vec![
        Step::List(vec![(0, 0, 5)]),
        Step::List(vec![(0, 0, 6)]),
        Step::List(vec![(0, 0, 8)]),
    ];
    // Fetch 13 and up only: topics by id.
    let broker = tokio::spawn(scripted_broker(l, Some((13, 17)), vec![script], asked.clone()));
    let source = spawn(addr, &[0]);
    broker.await.unwrap();
    until("the failure after the script", || source.last_error().is_some()).await;
    assert_eq!(source.learning(), Learning::Polling);
    assert_eq!((source.list_answers(), source.fetch_answers()), (3, 0));
    assert_eq!(hw(&source, 0), Some(8));
    assert_eq!(
        asked.lock().unwrap().len(),
        4,
        "three answered, the fourth closed: {asked:?}"
    );
    assert!(asked.lock().unwrap().iter().all(|a| matches!(a, Asked::List(_))));
}

#[tokio::test]
async fn a_failed_fetch_falls_back_to_list_offsets_then_the_long_poll_resumes() {
    let (l, addr) = listener().await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let scripts = vec![
        vec![Step::List(vec![(0, 0, 5)]), Step::FetchRefused(70)],
        // The source dials again: ListOffsets keeps the bound moving while the fetch pauses, then it resumes.
        vec![
            Step::ListRepeated(vec![(0, 0, 6)]),
            Step::Fetch(vec![(T, 0, 0, 9)], NOW),
        ],
    ];
    let broker = tokio::spawn(scripted_broker(l, Some((4, 12)), scripts, asked.clone()));
    let source = spawn(addr, &[0]);
    until("the fetch failure", || source.learning() == Learning::Polling).await;
    until("a ListOffsets answer on the new connection", || {
        hw(&source, 0) == Some(6)
    })
    .await;
    assert_eq!(source.fetch_answers(), 0);
    broker.await.unwrap();
    until("the long poll again", || source.fetch_answers() == 1).await;
    assert_eq!(hw(&source, 0), Some(9));
    let asked = asked.lock().unwrap().clone();
    let fetches: Vec<i64> = asked
        .iter()
        .filter_map(|a| match a {
            Asked::Fetch { partitions, .. } => Some(partitions[0].2),
            Asked::List(_) => None,
        })
        .collect();
    assert_eq!(
        fetches[..2],
        [5, 6],
        "the refused fetch at 5, then one parked at the polled 6: {asked:?}"
    );
}

#[tokio::test]
async fn a_broker_answering_at_once_without_news_is_not_asked_in_a_busy_loop() {
    let (l, addr) = listener().await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let mut script = vec![Step::List(vec![(0, 0, 5)])];
    script.extend((0..1000).map(|_| Step::Fetch(vec![(T, 0, 0, 5)], NOW)));
    let broker = tokio::spawn(scripted_broker(l, Some((4, 12)), vec![script], asked.clone()));
    let source = spawn(addr, &[0]);
    until("a first fetch answer", || source.fetch_answers() >= 1).await;
    let (start, at) = (source.fetch_answers(), Instant::now());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rate = (source.fetch_answers() - start) as f64 / at.elapsed().as_secs_f64();
    // One per ListOffsets interval (10 ms) at most: 100 a second, not thousands.
    assert!(rate <= 110.0, "{rate} fetches a second");
    assert_eq!(hw(&source, 0), Some(5));
    drop(source);
    broker.abort();
}

#[test]
fn the_request_groups_partitions_by_topic_and_answers_follow_the_asking_order() {
    let parts = vec![
        (("a".to_string(), 0), 3),
        (("a".to_string(), 2), 4),
        (("b".to_string(), 1), 5),
    ];
    let request = fetch_request(&parts, Duration::from_millis(250));
    assert_eq!(request.max_wait_ms, 250);
    let grouped: Vec<(String, Vec<(i32, i64)>)> = request
        .topics
        .iter()
        .map(|t| {
            (
                t.topic.0.to_string(),
                t.partitions.iter().map(|p| (p.partition, p.fetch_offset)).collect(),
            )
        })
        .collect();
    assert_eq!(
        grouped,
        [("a".to_string(), vec![(0, 3), (2, 4)]), ("b".to_string(), vec![(1, 5)])]
    );
    let response = FetchResponse::default().with_responses(vec![
        FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("b")))
            .with_partitions(vec![PartitionData::default()
                .with_partition_index(1)
                .with_high_watermark(6)]),
        FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("a")))
            .with_partitions(vec![PartitionData::default()
                .with_partition_index(0)
                .with_error_code(1)]),
    ]);
    assert_eq!(
        fetch_answers(&parts, &response).unwrap(),
        [
            PartitionAnswer::Error(1),
            PartitionAnswer::Missing,
            PartitionAnswer::HighWatermark(6)
        ]
    );
    let refused = FetchResponse::default().with_error_code(71);
    assert!(fetch_answers(&parts, &refused)
        .unwrap_err()
        .contains("InvalidFetchSessionEpoch"));
}

#[tokio::test]
async fn fetches_answered_back_to_back_are_spaced_by_the_partition_budget() {
    let (l, addr) = listener().await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let script = vec![Step::List(vec![(0, 0, 0), (1, 0, 0)]), Step::FetchAdvancing(100_000)];
    let broker = tokio::spawn(scripted_broker(l, Some((4, 12)), vec![script], asked));
    let parts = vec![(T.to_string(), 0), (T.to_string(), 1)];
    // Two partitions, 100 entries a second: one fetch per 20 ms at most, however fast the broker answers.
    let config = FetchHwConfig {
        partitions_per_second: 100,
        ..config()
    };
    let source = FetchHighWatermarks::spawn(&tokio::runtime::Handle::current(), addr, parts, config);
    until("a first fetch answer", || source.fetch_answers() >= 1).await;
    let (start, at) = (source.fetch_answers(), Instant::now());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let answered = source.fetch_answers() - start;
    let rate = answered as f64 / at.elapsed().as_secs_f64();
    assert!(rate <= 55.0, "{rate} fetches a second");
    assert!(answered >= 3, "{answered} fetches in 300 ms: the bound still follows");
    // Each answer moved the bound on by one: it follows the fetches answered.
    // (The count and the bound move under one lock: read between two counts.)
    let before = source.fetch_answers() as i64;
    let bound = hw(&source, 0).unwrap();
    assert!(
        (before..=source.fetch_answers() as i64).contains(&bound),
        "{bound} after {before} answers"
    );
    drop(source);
    broker.abort();
}
