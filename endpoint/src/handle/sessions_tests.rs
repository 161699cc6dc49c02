//! Incremental fetch sessions through the endpoint's Fetch handler: requests encoded as a client encodes them,
//! answers encoded as the connection sends them, over a replica of three partitions held in memory.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::sync::watch;

use super::{
    FetchSessionLimits, FETCH_SESSION_ID_NOT_FOUND, FETCH_SESSION_TOPIC_ID_ERROR, INVALID_FETCH_SESSION_EPOCH,
};
use crate::config::{Limits, ServeConfig};
use crate::group::{CommittedOffset, Coordinator, OffsetStore};
use crate::handle::Endpoint;
use crate::replica::*;

/// Per partition: its log start and its batches.
type Logs = BTreeMap<(String, i32), (i64, Vec<Vec<u8>>)>;

/// Topics "a" (partitions 0 and 1) and "b" (partition 0); each batch is 10 bytes, one per offset.
struct Three {
    logs: Mutex<Logs>,
    changes: watch::Sender<u64>,
}

const TOPICS: [(&str, [u8; 16]); 2] = [("a", [1; 16]), ("b", [2; 16])];

impl Three {
    fn new(batches: usize) -> Arc<Self> {
        let three = Arc::new(Self {
            logs: Mutex::new(BTreeMap::new()),
            changes: watch::Sender::new(0),
        });
        for (topic, partition) in [("a", 0), ("a", 1), ("b", 0)] {
            three
                .logs
                .lock()
                .unwrap()
                .insert((topic.into(), partition), (0, Vec::new()));
            for _ in 0..batches {
                three.append(topic, partition);
            }
        }
        three
    }

    fn append(&self, topic: &str, partition: i32) {
        let mut logs = self.logs.lock().unwrap();
        let (_, batches) = logs.get_mut(&(topic.to_string(), partition)).unwrap();
        let offset = batches.len() as u8;
        batches.push(vec![offset; 10]);
        drop(logs);
        self.changes.send_modify(|n| *n += 1);
    }

    fn set_log_start(&self, topic: &str, partition: i32, start: i64) {
        self.logs
            .lock()
            .unwrap()
            .get_mut(&(topic.to_string(), partition))
            .unwrap()
            .0 = start;
        self.changes.send_modify(|n| *n += 1);
    }
}

impl Replica for Three {
    fn link(&self) -> &str {
        "east"
    }
    fn state(&self) -> ReplicaState {
        ReplicaState::Replicating
    }
    fn topics(&self) -> Vec<TopicView> {
        vec![
            TopicView {
                name: "a".into(),
                id: [1; 16],
                partitions: vec![0, 1],
                configs: Vec::new(),
            },
            TopicView {
                name: "b".into(),
                id: [2; 16],
                partitions: vec![0],
                configs: Vec::new(),
            },
        ]
    }
    fn ends(&self, topic: &str, partition: i32) -> Result<PartitionEnds, ReadError> {
        let logs = self.logs.lock().unwrap();
        let (start, batches) = logs
            .get(&(topic.to_string(), partition))
            .ok_or(ReadError::UnknownPartition)?;
        Ok(PartitionEnds {
            log_start: *start,
            high_watermark: batches.len() as i64,
            last_stable: batches.len() as i64,
            leader_epoch: 0,
        })
    }
    fn read(&self, topic: &str, partition: i32, offset: i64, max: usize, _: Isolation) -> Result<Records, ReadError> {
        let ends = self.ends(topic, partition)?;
        if offset < ends.log_start || offset > ends.high_watermark {
            return Err(ReadError::OutOfRange { offset, ends });
        }
        let logs = self.logs.lock().unwrap();
        let mut bytes = Vec::new();
        for b in logs[&(topic.to_string(), partition)].1.iter().skip(offset as usize) {
            if !bytes.is_empty() && bytes.len() + b.len() > max {
                break;
            }
            bytes.extend_from_slice(b);
        }
        Ok(Records {
            ends,
            bytes: Bytes::from(bytes),
            aborted: Vec::new(),
        })
    }
    fn offset_for_timestamp(&self, _: &str, _: i32, _: i64) -> Result<Option<(i64, i64)>, ReadError> {
        Ok(None)
    }
    fn max_timestamp(&self, _: &str, _: i32) -> Result<Option<(i64, i64)>, ReadError> {
        Ok(None)
    }
    fn epoch_end(&self, _: &str, _: i32, _: i32) -> Result<(i32, i64), ReadError> {
        Ok((0, 0))
    }
    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

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

fn endpoint(replica: Arc<Three>, sessions: FetchSessionLimits) -> Endpoint {
    let config = ServeConfig {
        advertised_host: "127.0.0.1".into(),
        advertised_port: 9092,
        node_id: 0,
        cluster_id: "segmirror-east".into(),
        limits: Limits::default(),
    };
    let groups = Coordinator::new(Arc::new(NoOffsets), "east".into(), Arc::new(|_: &str, _: i32| true));
    Endpoint::new(replica, groups, config).with_fetch_sessions(sessions)
}

/// A fetch request as a client writes it: `parts` (topic, partition, offset) to fetch, `forgotten` to forget.
fn request(
    version: i16,
    session: (i32, i32),
    parts: &[(&str, i32, i64)],
    forgotten: &[(&str, i32)],
    max_wait_ms: i32,
) -> FetchRequest {
    let topic_id = |name: &str| uuid::Uuid::from_bytes(TOPICS.iter().find(|t| t.0 == name).map_or([9; 16], |t| t.1));
    let mut topics: Vec<FetchTopic> = Vec::new();
    for &(name, partition, offset) in parts {
        let mut p = FetchPartition::default();
        p.partition = partition;
        p.fetch_offset = offset;
        p.partition_max_bytes = 1 << 20;
        let same = topics.last().is_some_and(|t| {
            if version >= 13 {
                t.topic_id == topic_id(name)
            } else {
                t.topic.0.as_str() == name
            }
        });
        if !same {
            let mut t = FetchTopic::default();
            if version >= 13 {
                t.topic_id = topic_id(name);
            } else {
                t.topic = TopicName(StrBytes::from_string(name.into()));
            }
            topics.push(t);
        }
        topics.last_mut().unwrap().partitions.push(p);
    }
    let mut request = FetchRequest::default();
    request.replica_id = BrokerId(-1);
    request.max_wait_ms = max_wait_ms;
    request.min_bytes = 1;
    request.max_bytes = 50 << 20;
    if version >= 7 {
        (request.session_id, request.session_epoch) = session;
        request.forgotten_topics_data = forgotten
            .iter()
            .map(|&(name, partition)| {
                let mut f = ForgottenTopic::default();
                if version >= 13 {
                    f.topic_id = topic_id(name);
                } else {
                    f.topic = TopicName(StrBytes::from_string(name.into()));
                }
                f.partitions = vec![partition];
                f
            })
            .collect();
    }
    request.topics = topics;
    request
}

/// A fetch as the connection answers it: the request encoded and decoded as `version`, the answer too.
async fn fetch(endpoint: &Endpoint, version: i16, request: &FetchRequest) -> FetchResponse {
    let mut body = BytesMut::new();
    request.encode(&mut body, version).unwrap();
    let decoded = FetchRequest::decode(&mut body.freeze(), version).unwrap();
    let answer = super::super::fetch::answer(endpoint, decoded, version, false).await;
    let mut out = BytesMut::new();
    answer.response.encode(&mut out, version).unwrap();
    FetchResponse::decode(&mut out.freeze(), version).unwrap()
}

/// An answer's partitions: (topic, partition, record bytes, high watermark, error), topic ids named back.
fn parts(response: &FetchResponse) -> Vec<(String, i32, usize, i64, i16)> {
    response
        .responses
        .iter()
        .flat_map(|t| {
            let name = if t.topic_id.is_nil() {
                t.topic.0.to_string()
            } else {
                let id = *t.topic_id.as_bytes();
                TOPICS.iter().find(|k| k.1 == id).map_or("?", |k| k.0).to_string()
            };
            t.partitions.iter().map(move |p| {
                (
                    name.clone(),
                    p.partition_index,
                    p.records.as_ref().map_or(0, Bytes::len),
                    p.high_watermark,
                    p.error_code,
                )
            })
        })
        .collect()
}

fn p(topic: &str, partition: i32, bytes: usize, hw: i64) -> (String, i32, usize, i64, i16) {
    (topic.to_string(), partition, bytes, hw, 0)
}

const ALL: [(&str, i32, i64); 3] = [("a", 0, 0), ("a", 1, 0), ("b", 0, 0)];

#[tokio::test]
async fn a_full_fetch_opens_a_session_and_incremental_ones_carry_only_what_changed() {
    for version in [7, 12, 13, 16] {
        let three = Three::new(2);
        let endpoint = endpoint(three.clone(), FetchSessionLimits::default());
        let full = fetch(&endpoint, version, &request(version, (0, 0), &ALL, &[], 0)).await;
        assert_eq!(full.error_code, 0);
        let id = full.session_id;
        assert_ne!(id, 0, "v{version}: no session created");
        assert_eq!(parts(&full), vec![p("a", 0, 20, 2), p("a", 1, 20, 2), p("b", 0, 20, 2)]);
        // The client moves its offsets to the end: nothing changed, so nothing is sent.
        let moved = [("a", 0, 2), ("a", 1, 2), ("b", 0, 2)];
        let quiet = fetch(&endpoint, version, &request(version, (id, 1), &moved, &[], 0)).await;
        assert_eq!((quiet.error_code, quiet.session_id), (0, id));
        assert_eq!(parts(&quiet), vec![]);
        // New records on a-1: only a-1 is sent, though the request names no partition.
        three.append("a", 1);
        let one = fetch(&endpoint, version, &request(version, (id, 2), &[], &[], 0)).await;
        assert_eq!(one.session_id, id);
        assert_eq!(parts(&one), vec![p("a", 1, 10, 3)]);
        // A moved log start is sent without records; the others stay quiet.
        three.set_log_start("b", 0, 1);
        let start = fetch(&endpoint, version, &request(version, (id, 3), &[("a", 1, 3)], &[], 0)).await;
        let b = &start.responses[0].partitions[0];
        assert_eq!(parts(&start), vec![p("b", 0, 0, 2)]);
        assert_eq!(b.log_start_offset, 1);
        let again = fetch(&endpoint, version, &request(version, (id, 4), &[], &[], 0)).await;
        assert_eq!(parts(&again), vec![]);
        assert_eq!(endpoint.sessions.len(), 1);
    }
}

#[tokio::test]
async fn an_incremental_fetch_with_nothing_new_waits_and_is_woken_by_new_records() {
    let three = Three::new(1);
    let endpoint = endpoint(three.clone(), FetchSessionLimits::default());
    let full = fetch(&endpoint, 12, &request(12, (0, 0), &ALL, &[], 0)).await;
    let id = full.session_id;
    let moved = [("a", 0, 1), ("a", 1, 1), ("b", 0, 1)];
    let appender = {
        let three = three.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            three.append("b", 0);
        })
    };
    let started = Instant::now();
    let woken = fetch(&endpoint, 12, &request(12, (id, 1), &moved, &[], 5000)).await;
    let waited = started.elapsed();
    appender.await.unwrap();
    assert_eq!(parts(&woken), vec![p("b", 0, 10, 2)]);
    assert!(
        waited >= Duration::from_millis(150),
        "answered before the data came: {waited:?}"
    );
    assert!(waited < Duration::from_secs(4), "not woken by the new data: {waited:?}");
    // Nothing new at all: the wait ends at max_wait_ms with an empty incremental answer.
    let started = Instant::now();
    let empty = fetch(&endpoint, 12, &request(12, (id, 2), &[("b", 0, 2)], &[], 300)).await;
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert_eq!((empty.error_code, empty.session_id, parts(&empty)), (0, id, vec![]));
}

#[tokio::test]
async fn forgotten_partitions_leave_the_session_and_forgetting_all_ends_it() {
    for version in [12, 16] {
        let three = Three::new(1);
        let endpoint = endpoint(three.clone(), FetchSessionLimits::default());
        let id = fetch(&endpoint, version, &request(version, (0, 0), &ALL, &[], 0))
            .await
            .session_id;
        let moved = [("a", 0, 1), ("a", 1, 1), ("b", 0, 1)];
        let forget = fetch(
            &endpoint,
            version,
            &request(version, (id, 1), &moved, &[("b", 0), ("a", 1)], 0),
        )
        .await;
        assert_eq!((forget.session_id, parts(&forget)), (id, vec![]));
        three.append("b", 0);
        three.append("a", 1);
        three.append("a", 0);
        let left = fetch(&endpoint, version, &request(version, (id, 2), &[], &[], 0)).await;
        assert_eq!(parts(&left), vec![p("a", 0, 10, 2)], "v{version}");
        // Forgetting the last partition ends the session: a sessionless answer, and the id is gone.
        let last = fetch(&endpoint, version, &request(version, (id, 3), &[], &[("a", 0)], 0)).await;
        assert_eq!((last.error_code, last.session_id), (0, 0));
        assert_eq!(endpoint.sessions.len(), 0);
        let gone = fetch(&endpoint, version, &request(version, (id, 4), &[], &[], 0)).await;
        assert_eq!(gone.error_code, FETCH_SESSION_ID_NOT_FOUND);
    }
}

#[tokio::test]
async fn a_wrong_epoch_is_refused_and_the_session_kept() {
    let endpoint = endpoint(Three::new(1), FetchSessionLimits::default());
    let id = fetch(&endpoint, 12, &request(12, (0, 0), &ALL, &[], 0))
        .await
        .session_id;
    for epoch in [2, 7, -2, i32::MAX] {
        let wrong = fetch(&endpoint, 12, &request(12, (id, epoch), &[], &[], 0)).await;
        assert_eq!(wrong.error_code, INVALID_FETCH_SESSION_EPOCH, "epoch {epoch}");
        assert!(wrong.responses.is_empty());
    }
    let right = fetch(&endpoint, 12, &request(12, (id, 1), &[], &[], 0)).await;
    assert_eq!((right.error_code, right.session_id), (0, id));
    // The same epoch again (a duplicate request) is refused: the session expects 2 now.
    let duplicate = fetch(&endpoint, 12, &request(12, (id, 1), &[], &[], 0)).await;
    assert_eq!(duplicate.error_code, INVALID_FETCH_SESSION_EPOCH);
    let next = fetch(&endpoint, 12, &request(12, (id, 2), &[], &[], 0)).await;
    assert_eq!(next.error_code, 0);
}

#[tokio::test]
async fn an_unknown_session_is_refused_and_a_session_keeps_its_topic_keying() {
    let endpoint = endpoint(Three::new(1), FetchSessionLimits::default());
    let unknown = fetch(&endpoint, 12, &request(12, (12345, 1), &ALL, &[], 0)).await;
    assert_eq!(
        (unknown.error_code, unknown.session_id),
        (FETCH_SESSION_ID_NOT_FOUND, 0)
    );
    assert!(unknown.responses.is_empty());
    // A session opened by names (v12) cannot be used by ids (v13), nor the reverse.
    let by_name = fetch(&endpoint, 12, &request(12, (0, 0), &ALL, &[], 0))
        .await
        .session_id;
    let crossed = fetch(&endpoint, 13, &request(13, (by_name, 1), &[], &[], 0)).await;
    assert_eq!(crossed.error_code, FETCH_SESSION_TOPIC_ID_ERROR);
    let by_id = fetch(&endpoint, 16, &request(16, (0, 0), &ALL, &[], 0))
        .await
        .session_id;
    let crossed = fetch(&endpoint, 12, &request(12, (by_id, 1), &[], &[], 0)).await;
    assert_eq!(crossed.error_code, FETCH_SESSION_TOPIC_ID_ERROR);
    assert_ne!(by_name, by_id);
}

#[tokio::test]
async fn a_full_cache_answers_without_a_session_and_only_a_stale_session_makes_room() {
    let busy = FetchSessionLimits {
        slots: 1,
        evict_after: Duration::from_secs(3600),
        ..FetchSessionLimits::default()
    };
    let endpoint1 = endpoint(Three::new(1), busy);
    let first = fetch(&endpoint1, 12, &request(12, (0, 0), &ALL, &[], 0))
        .await
        .session_id;
    assert_ne!(first, 0);
    let second = fetch(&endpoint1, 12, &request(12, (0, 0), &ALL, &[], 0)).await;
    assert_eq!(
        (second.error_code, second.session_id),
        (0, 0),
        "the cache is full: no session"
    );
    assert_eq!(parts(&second).len(), 3, "a sessionless answer carries every partition");
    let still = fetch(&endpoint1, 12, &request(12, (first, 1), &[], &[], 0)).await;
    assert_eq!((still.error_code, still.session_id), (0, first));

    // Sessions stale at once: a new one evicts the least recently used, never the others.
    let stale = FetchSessionLimits {
        slots: 2,
        evict_after: Duration::ZERO,
        ..FetchSessionLimits::default()
    };
    let endpoint2 = endpoint(Three::new(1), stale);
    let a = fetch(&endpoint2, 12, &request(12, (0, 0), &ALL, &[], 0))
        .await
        .session_id;
    let b = fetch(&endpoint2, 12, &request(12, (0, 0), &ALL, &[], 0))
        .await
        .session_id;
    let used = fetch(&endpoint2, 12, &request(12, (a, 1), &[], &[], 0)).await;
    assert_eq!(used.error_code, 0);
    let c = fetch(&endpoint2, 12, &request(12, (0, 0), &ALL, &[], 0))
        .await
        .session_id;
    assert!(a != 0 && b != 0 && c != 0 && a != b && b != c && a != c);
    assert_eq!(endpoint2.sessions.len(), 2);
    let evicted = fetch(&endpoint2, 12, &request(12, (b, 1), &[], &[], 0)).await;
    assert_eq!(evicted.error_code, FETCH_SESSION_ID_NOT_FOUND);
    let kept = fetch(&endpoint2, 12, &request(12, (a, 2), &[], &[], 0)).await;
    assert_eq!(kept.error_code, 0);

    // No slots: every fetch is answered without a session.
    let off = FetchSessionLimits {
        slots: 0,
        ..FetchSessionLimits::default()
    };
    let endpoint3 = endpoint(Three::new(1), off);
    let none = fetch(&endpoint3, 16, &request(16, (0, 0), &ALL, &[], 0)).await;
    assert_eq!((none.session_id, parts(&none).len()), (0, 3));
}

#[tokio::test]
async fn closing_a_session_with_the_final_epoch_and_replacing_it_with_the_initial_one() {
    let endpoint = endpoint(Three::new(1), FetchSessionLimits::default());
    let id = fetch(&endpoint, 12, &request(12, (0, 0), &ALL, &[], 0))
        .await
        .session_id;
    // Epoch -1 with the id: the session is closed, and this full request answered without one.
    let closing = fetch(&endpoint, 12, &request(12, (id, -1), &ALL, &[], 0)).await;
    assert_eq!(
        (closing.error_code, closing.session_id, parts(&closing).len()),
        (0, 0, 3)
    );
    assert_eq!(endpoint.sessions.len(), 0);
    let gone = fetch(&endpoint, 12, &request(12, (id, 1), &[], &[], 0)).await;
    assert_eq!(gone.error_code, FETCH_SESSION_ID_NOT_FOUND);
    // Epoch 0 with an id: that session is closed and a new one opened.
    let old = fetch(&endpoint, 12, &request(12, (0, 0), &ALL, &[], 0))
        .await
        .session_id;
    let new = fetch(&endpoint, 12, &request(12, (old, 0), &ALL, &[], 0))
        .await
        .session_id;
    assert!(new != 0 && new != old);
    assert_eq!(endpoint.sessions.len(), 1);
    let refused = fetch(&endpoint, 12, &request(12, (old, 1), &[], &[], 0)).await;
    assert_eq!(refused.error_code, FETCH_SESSION_ID_NOT_FOUND);
    // Fetch v4-v6 carry no session fields: always answered without a session.
    for version in [4, 6] {
        let old_client = fetch(&endpoint, version, &request(version, (0, 0), &ALL, &[], 0)).await;
        assert_eq!(parts(&old_client).len(), 3);
    }
    assert_eq!(endpoint.sessions.len(), 1);
}

#[tokio::test]
async fn a_session_holds_no_more_partitions_than_the_replica_serves_nor_more_bytes_than_allowed() {
    let endpoint1 = endpoint(Three::new(1), FetchSessionLimits::default());
    let mut four = ALL.to_vec();
    four.push(("nope", 0, 0));
    let too_many = fetch(&endpoint1, 12, &request(12, (0, 0), &four, &[], 0)).await;
    assert_eq!(too_many.session_id, 0);
    assert_eq!(parts(&too_many).len(), 4);
    assert_eq!(parts(&too_many)[3].4, 3, "the unknown topic is an error");
    // Growing a session past it: the session ends, this request is answered in full without one.
    let id = fetch(&endpoint1, 12, &request(12, (0, 0), &ALL[..2], &[], 0))
        .await
        .session_id;
    let grown = fetch(
        &endpoint1,
        12,
        &request(12, (id, 1), &[("b", 0, 0), ("nope", 0, 0)], &[], 0),
    )
    .await;
    assert_eq!((grown.error_code, grown.session_id), (0, 0));
    assert_eq!(parts(&grown).len(), 4);
    assert_eq!(endpoint1.sessions.len(), 0);

    // 3 partitions of topic "a"/"b" cost about 3 * 162 bytes: over a 400-byte budget.
    let small = FetchSessionLimits {
        cached_bytes: 400,
        ..FetchSessionLimits::default()
    };
    let endpoint2 = endpoint(Three::new(1), small);
    let over = fetch(&endpoint2, 12, &request(12, (0, 0), &ALL, &[], 0)).await;
    assert_eq!((over.session_id, parts(&over).len()), (0, 3));
    let two = fetch(&endpoint2, 12, &request(12, (0, 0), &ALL[..2], &[], 0)).await;
    assert_ne!(two.session_id, 0);
}

#[tokio::test]
async fn errors_are_sent_every_time_and_the_partition_again_once_they_clear() {
    let three = Three::new(2);
    let endpoint = endpoint(three.clone(), FetchSessionLimits::default());
    let id = fetch(&endpoint, 12, &request(12, (0, 0), &ALL, &[], 0))
        .await
        .session_id;
    let out_of_range = [("a", 0, 99), ("a", 1, 2), ("b", 0, 2)];
    let first = fetch(&endpoint, 12, &request(12, (id, 1), &out_of_range, &[], 5000)).await;
    assert_eq!(parts(&first), vec![("a".into(), 0, 0, 2, 1)]);
    let started = Instant::now();
    let again = fetch(&endpoint, 12, &request(12, (id, 2), &[], &[], 5000)).await;
    assert_eq!(
        parts(&again),
        vec![("a".into(), 0, 0, 2, 1)],
        "an error is sent every time"
    );
    assert!(started.elapsed() < Duration::from_secs(2), "an error does not wait");
    // Back in range at the end: sent once more (its ends were not sent since the error), then quiet.
    let cleared = fetch(&endpoint, 12, &request(12, (id, 3), &[("a", 0, 2)], &[], 0)).await;
    assert_eq!(parts(&cleared), vec![p("a", 0, 0, 2)]);
    let quiet = fetch(&endpoint, 12, &request(12, (id, 4), &[], &[], 0)).await;
    assert_eq!(parts(&quiet), vec![]);
}

#[tokio::test]
async fn partitions_that_got_records_go_to_the_back_so_a_small_budget_takes_turns() {
    let three = Three::new(4);
    let endpoint = endpoint(three.clone(), FetchSessionLimits::default());
    let two = [("a", 0, 0), ("a", 1, 0)];
    let mut full = request(12, (0, 0), &two, &[], 0);
    full.max_bytes = 10;
    let answer = fetch(&endpoint, 12, &full).await;
    let id = answer.session_id;
    assert_eq!(parts(&answer), vec![p("a", 0, 10, 4), p("a", 1, 0, 4)]);
    // The full answer keeps the request's order; from then on the partition that got records goes last.
    let mut offsets = [1i64, 0];
    let mut turns = Vec::new();
    for epoch in 1..=4 {
        let named = [("a", 0, offsets[0]), ("a", 1, offsets[1])];
        let mut next = request(12, (id, epoch), &named, &[], 0);
        next.max_bytes = 10;
        let answer = fetch(&endpoint, 12, &next).await;
        let got: Vec<_> = parts(&answer).into_iter().filter(|p| p.2 > 0).collect();
        assert_eq!(got.len(), 1, "epoch {epoch}: {:?}", parts(&answer));
        offsets[got[0].1 as usize] += 1;
        turns.push(got[0].1);
    }
    assert_eq!(turns, vec![0, 1, 0, 1]);
}
