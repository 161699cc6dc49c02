//! The coordinator as clients drive it: real timers (short ones), an in-memory offset store, and every response
//! encoded at the version it answers (an answer the wire cannot carry is a failure).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::{OffsetFetchRequestGroup, OffsetFetchRequestTopic};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Encodable, StrBytes};

use super::{ClientInfo, CommittedOffset, Coordinator, GroupLimits, GroupState, OffsetStore};

/// One group's offsets by (topic, partition).
type GroupOffsets = BTreeMap<(String, i32), CommittedOffset>;

/// Offsets in memory, as the catalog keeps them: per group, per partition, the last commit wins.
#[derive(Default)]
struct MemStore {
    groups: Mutex<BTreeMap<String, GroupOffsets>>,
    failing: AtomicBool,
}

impl MemStore {
    fn check(&self) -> Result<(), String> {
        if self.failing.load(Ordering::SeqCst) {
            Err("disk on fire".into())
        } else {
            Ok(())
        }
    }
}

impl OffsetStore for MemStore {
    fn commit(&self, group: &str, offsets: &[CommittedOffset]) -> Result<(), String> {
        self.check()?;
        let mut groups = self.groups.lock().unwrap();
        let g = groups.entry(group.to_owned()).or_default();
        for o in offsets {
            g.insert((o.topic.clone(), o.partition), o.clone());
        }
        Ok(())
    }
    fn fetch(&self, group: &str) -> Result<Vec<CommittedOffset>, String> {
        self.check()?;
        Ok(self
            .groups
            .lock()
            .unwrap()
            .get(group)
            .map(|g| g.values().cloned().collect())
            .unwrap_or_default())
    }
    fn groups(&self) -> Result<Vec<String>, String> {
        self.check()?;
        Ok(self.groups.lock().unwrap().keys().cloned().collect())
    }
    fn delete(&self, group: &str) -> Result<(), String> {
        self.check()?;
        self.groups.lock().unwrap().remove(group);
        Ok(())
    }
}

const SESSION_MS: i32 = 5_000;
const REBALANCE_MS: i32 = 3_000;
/// Long enough for any answer the coordinator owes; a test waiting longer has found a hang.
const PATIENCE: Duration = Duration::from_secs(15);

fn limits() -> GroupLimits {
    GroupLimits {
        initial_rebalance_delay: Duration::from_millis(100),
        min_session_timeout: Duration::from_millis(10),
        ..GroupLimits::default()
    }
}

/// The endpoint serves partitions 0..3 of `orders`.
fn coordinator(store: Arc<MemStore>, limits: GroupLimits) -> Coordinator {
    let served = Arc::new(|topic: &str, partition: i32| topic == "orders" && (0..3).contains(&partition));
    Coordinator::with_limits(store, "l".into(), served, limits)
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

fn gid(text: &str) -> GroupId {
    GroupId(s(text))
}

fn encodes<T: Encodable>(response: &T, version: i16) {
    let mut buf = Vec::new();
    response
        .encode(&mut buf, version)
        .unwrap_or_else(|e| panic!("cannot encode at v{version}: {e}"));
}

fn error(code: i16) -> Option<ResponseError> {
    (code != 0).then(|| ResponseError::try_from_code(code).unwrap_or(ResponseError::Unknown(code)))
}

async fn patiently<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(PATIENCE, f)
        .await
        .expect("the coordinator never answered")
}

fn join_request(group: &str, member_id: &str, session_ms: i32, protocols: &[(&str, &str)]) -> JoinGroupRequest {
    let mut r = JoinGroupRequest::default();
    r.group_id = gid(group);
    r.member_id = s(member_id);
    r.session_timeout_ms = session_ms;
    r.rebalance_timeout_ms = REBALANCE_MS;
    r.protocol_type = s("consumer");
    r.protocols = protocols
        .iter()
        .map(|(name, meta)| {
            let mut p = JoinGroupRequestProtocol::default();
            p.name = s(name);
            p.metadata = Bytes::from(meta.to_string());
            p
        })
        .collect();
    r
}

async fn join(c: &Coordinator, version: i16, req: JoinGroupRequest) -> JoinGroupResponse {
    let client = ClientInfo {
        client_id: "consumer".into(),
        client_host: "/127.0.0.1".into(),
    };
    let r = patiently(c.join_group_from(req, version, &client)).await;
    encodes(&r, version);
    r
}

/// A member id from JoinGroup v9's MEMBER_ID_REQUIRED.
async fn member_id(c: &Coordinator, group: &str) -> String {
    let r = join(c, 9, join_request(group, "", SESSION_MS, &[("range", "sub")])).await;
    assert_eq!(error(r.error_code), Some(ResponseError::MemberIdRequired));
    assert!(r.member_id.starts_with("consumer-"), "{}", r.member_id);
    r.member_id.to_string()
}

/// Each id joins (concurrently) with its own subscription; answers in the order of `ids`.
async fn join_all(c: &Coordinator, group: &str, ids: &[String], session_ms: i32) -> Vec<JoinGroupResponse> {
    let tasks: Vec<_> = ids
        .iter()
        .map(|id| {
            let c = c.clone();
            let req = join_request(group, id, session_ms, &[("range", &format!("sub-{id}"))]);
            tokio::spawn(async move { join(&c, 9, req).await })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    answers
}

fn sync_request(group: &str, member_id: &str, generation: i32, assignments: &[(&str, &str)]) -> SyncGroupRequest {
    let mut r = SyncGroupRequest::default();
    r.group_id = gid(group);
    r.member_id = s(member_id);
    r.generation_id = generation;
    r.protocol_type = Some(s("consumer"));
    r.protocol_name = Some(s("range"));
    r.assignments = assignments
        .iter()
        .map(|(member, assignment)| {
            let mut a = SyncGroupRequestAssignment::default();
            a.member_id = s(member);
            a.assignment = Bytes::from(assignment.to_string());
            a
        })
        .collect();
    r
}

async fn sync(c: &Coordinator, req: SyncGroupRequest) -> SyncGroupResponse {
    let r = patiently(c.sync_group(req, 5)).await;
    encodes(&r, 5);
    r
}

async fn heartbeat(c: &Coordinator, group: &str, member_id: &str, generation: i32) -> Option<ResponseError> {
    let mut req = HeartbeatRequest::default();
    req.group_id = gid(group);
    req.member_id = s(member_id);
    req.generation_id = generation;
    let r = c.heartbeat(req, 4).await;
    encodes(&r, 4);
    error(r.error_code)
}

/// Members join, the leader assigns "to-<id>" to each, everyone syncs: the generation, the leader and the
/// member ids.
async fn form(c: &Coordinator, group: &str, n: usize, session_ms: i32) -> (i32, String, Vec<String>) {
    let mut ids = Vec::new();
    for _ in 0..n {
        ids.push(member_id(c, group).await);
    }
    let joined = join_all(c, group, &ids, session_ms).await;
    let generation = joined[0].generation_id;
    let leader = joined[0].leader.to_string();
    for r in &joined {
        assert_eq!(error(r.error_code), None);
        assert_eq!((r.generation_id, r.leader.as_str()), (generation, leader.as_str()));
    }
    let assignments: Vec<(String, String)> = ids.iter().map(|id| (id.clone(), format!("to-{id}"))).collect();
    let pairs: Vec<(&str, &str)> = assignments.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let tasks: Vec<_> = ids
        .iter()
        .map(|id| {
            let c = c.clone();
            let given = if *id == leader { pairs.clone() } else { Vec::new() };
            let req = sync_request(group, id, generation, &given);
            tokio::spawn(async move { sync(&c, req).await })
        })
        .collect();
    for (id, t) in ids.iter().zip(tasks) {
        let r = t.await.unwrap();
        assert_eq!(error(r.error_code), None);
        assert_eq!(r.assignment, Bytes::from(format!("to-{id}")));
    }
    (generation, leader, ids)
}

fn commit_request(group: &str, member_id: &str, generation: i32, offsets: &[(&str, i32, i64)]) -> OffsetCommitRequest {
    let mut r = OffsetCommitRequest::default();
    r.group_id = gid(group);
    r.member_id = s(member_id);
    r.generation_id_or_member_epoch = generation;
    let mut topics: BTreeMap<&str, Vec<OffsetCommitRequestPartition>> = BTreeMap::new();
    for (topic, partition, offset) in offsets {
        let mut p = OffsetCommitRequestPartition::default();
        p.partition_index = *partition;
        p.committed_offset = *offset;
        p.committed_leader_epoch = 7;
        p.committed_metadata = Some(s("meta"));
        topics.entry(topic).or_default().push(p);
    }
    r.topics = topics
        .into_iter()
        .map(|(name, partitions)| {
            let mut t = OffsetCommitRequestTopic::default();
            t.name = TopicName(s(name));
            t.partitions = partitions;
            t
        })
        .collect();
    r
}

/// Each partition's error, by (topic, partition).
async fn commit(c: &Coordinator, req: OffsetCommitRequest) -> BTreeMap<(String, i32), Option<ResponseError>> {
    commit_at(c, req, 9).await
}

async fn commit_at(
    c: &Coordinator,
    req: OffsetCommitRequest,
    version: i16,
) -> BTreeMap<(String, i32), Option<ResponseError>> {
    let r = c.offset_commit(req, version).await;
    encodes(&r, version);
    r.topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| ((t.name.0.to_string(), p.partition_index), error(p.error_code)))
        })
        .collect()
}

/// OffsetFetch v7 of `orders` 0..3: (offset, leader epoch) per partition.
async fn fetched(c: &Coordinator, group: &str) -> Vec<(i64, i32)> {
    let mut req = OffsetFetchRequest::default();
    req.group_id = gid(group);
    let mut t = OffsetFetchRequestTopic::default();
    t.name = TopicName(s("orders"));
    t.partition_indexes = vec![0, 1, 2];
    req.topics = Some(vec![t]);
    let r = c.offset_fetch(req, 7).await;
    encodes(&r, 7);
    assert_eq!(error(r.error_code), None);
    r.topics[0]
        .partitions
        .iter()
        .map(|p| (p.committed_offset, p.committed_leader_epoch))
        .collect()
}

fn leave_request(group: &str, member_ids: &[&str]) -> LeaveGroupRequest {
    let mut r = LeaveGroupRequest::default();
    r.group_id = gid(group);
    r.members = member_ids
        .iter()
        .map(|id| {
            let mut m = MemberIdentity::default();
            m.member_id = s(id);
            m
        })
        .collect();
    r
}

#[tokio::test]
async fn two_members_join_and_sync_and_get_their_assignments() {
    let c = coordinator(Arc::default(), limits());
    let a = member_id(&c, "g").await;
    let b = member_id(&c, "g").await;
    assert_ne!(a, b);
    let joined = join_all(&c, "g", &[a.clone(), b.clone()], SESSION_MS).await;
    let generation = joined[0].generation_id;
    assert_eq!(generation, 1);
    assert_eq!(joined[0].leader.as_str(), a, "the first member to join leads");
    assert_eq!(joined[0].protocol_name.as_ref().map(|p| p.as_str()), Some("range"));
    assert_eq!(joined[0].protocol_type.as_ref().map(|p| p.as_str()), Some("consumer"));
    // The leader sees both members and their subscriptions, the follower sees none.
    let members: Vec<(String, Bytes)> = joined[0]
        .members
        .iter()
        .map(|m| (m.member_id.to_string(), m.metadata.clone()))
        .collect();
    assert_eq!(
        members,
        [
            (a.clone(), Bytes::from(format!("sub-{a}"))),
            (b.clone(), Bytes::from(format!("sub-{b}")))
        ]
    );
    assert!(joined[1].members.is_empty());
    assert_eq!(c.group_state("g"), Some(GroupState::CompletingRebalance));

    // The follower's SyncGroup waits for the leader's assignment.
    let follower = {
        let c = c.clone();
        let req = sync_request("g", &b, generation, &[]);
        tokio::spawn(async move { sync(&c, req).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!follower.is_finished(), "the follower must wait for the leader");
    let leader = sync(&c, sync_request("g", &a, generation, &[(&a, "p0,p1"), (&b, "p2")])).await;
    assert_eq!(error(leader.error_code), None);
    assert_eq!(leader.assignment, Bytes::from("p0,p1"));
    assert_eq!(leader.protocol_name.as_ref().map(|p| p.as_str()), Some("range"));
    let follower = patiently(follower).await.unwrap();
    assert_eq!(error(follower.error_code), None);
    assert_eq!(follower.assignment, Bytes::from("p2"));
    assert_eq!(c.group_state("g"), Some(GroupState::Stable));
    assert_eq!(heartbeat(&c, "g", &a, generation).await, None);
    assert_eq!(heartbeat(&c, "g", &b, generation).await, None);

    // DescribeGroups shows the stable group, its members' subscriptions and assignments.
    let mut req = DescribeGroupsRequest::default();
    req.groups = vec![gid("g"), gid("nope")];
    let d = c.describe_groups(req, 5).await;
    encodes(&d, 5);
    assert_eq!(d.groups[0].group_state.as_str(), "Stable");
    assert_eq!(d.groups[0].protocol_data.as_str(), "range");
    assert_eq!(d.groups[0].members.len(), 2);
    assert_eq!(d.groups[0].members[1].member_assignment, Bytes::from("p2"));
    assert_eq!(d.groups[0].members[1].client_host.as_str(), "/127.0.0.1");
    assert_eq!(d.groups[1].group_state.as_str(), "Dead");
}

#[tokio::test]
async fn a_member_that_leaves_starts_a_rebalance_and_the_other_rejoins_alone() {
    let c = coordinator(Arc::default(), limits());
    let (generation, leader, ids) = form(&c, "g", 2, SESSION_MS).await;
    let (a, b) = (&ids[0], &ids[1]);
    assert_eq!(&leader, a);

    // The leader leaves (batch form, with one unknown member beside it).
    let r = c.leave_group(leave_request("g", &[a, "ghost"]), 5).await;
    encodes(&r, 5);
    assert_eq!(error(r.error_code), None);
    let answers: Vec<_> = r.members.iter().map(|m| error(m.error_code)).collect();
    assert_eq!(answers, [None, Some(ResponseError::UnknownMemberId)]);
    assert_eq!(c.group_state("g"), Some(GroupState::PreparingRebalance));
    assert_eq!(
        heartbeat(&c, "g", b, generation).await,
        Some(ResponseError::RebalanceInProgress)
    );
    assert_eq!(
        heartbeat(&c, "g", a, generation).await,
        Some(ResponseError::UnknownMemberId)
    );

    // The other member rejoins: every known member has, so the rebalance completes at once, with it alone.
    let started = tokio::time::Instant::now();
    let rejoined = join_all(&c, "g", std::slice::from_ref(b), SESSION_MS).await;
    assert!(
        started.elapsed() < Duration::from_millis(REBALANCE_MS as u64 / 2),
        "waited for nobody"
    );
    let r = &rejoined[0];
    assert_eq!(error(r.error_code), None);
    assert_eq!(r.generation_id, generation + 1);
    assert_eq!(r.leader.as_str(), b);
    let members: Vec<&str> = r.members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(members, [b.as_str()]);
    let synced = sync(&c, sync_request("g", b, generation + 1, &[(b, "all")])).await;
    assert_eq!(synced.assignment, Bytes::from("all"));
    assert_eq!(c.group_state("g"), Some(GroupState::Stable));
    // The old generation is over.
    assert_eq!(
        heartbeat(&c, "g", b, generation).await,
        Some(ResponseError::IllegalGeneration)
    );

    // The last member leaves (v0 form): the group empties and is forgotten.
    let mut req = LeaveGroupRequest::default();
    req.group_id = gid("g");
    req.member_id = s(b);
    let r = c.leave_group(req, 0).await;
    encodes(&r, 0);
    assert_eq!(error(r.error_code), None);
    patiently(async {
        while c.group_state("g").is_some() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_member_that_stops_heartbeating_expires_and_the_group_rebalances_without_it() {
    let c = coordinator(Arc::default(), limits());
    let session_ms = 400;
    let (generation, _, ids) = form(&c, "g", 2, session_ms).await;
    let (a, b) = (&ids[0], &ids[1]);
    // A keeps heartbeating, B goes silent: within B's session A is told to rejoin.
    let started = tokio::time::Instant::now();
    loop {
        match heartbeat(&c, "g", a, generation).await {
            None => {}
            Some(ResponseError::RebalanceInProgress) => break,
            other => panic!("unexpected heartbeat answer {other:?}"),
        }
        assert!(started.elapsed() < PATIENCE, "the silent member never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        started.elapsed() >= Duration::from_millis(session_ms as u64 / 2),
        "expired before its session could run out: {:?}",
        started.elapsed()
    );
    assert_eq!(
        heartbeat(&c, "g", b, generation).await,
        Some(ResponseError::UnknownMemberId)
    );
    let rejoined = join_all(&c, "g", std::slice::from_ref(a), session_ms).await;
    let members: Vec<&str> = rejoined[0].members.iter().map(|m| m.member_id.as_str()).collect();
    assert_eq!(members, [a.as_str()]);
    assert_eq!(rejoined[0].generation_id, generation + 1);
}

#[tokio::test]
async fn a_member_that_does_not_rejoin_in_time_is_dropped_from_the_next_generation() {
    let c = coordinator(Arc::default(), limits());
    let (generation, _, ids) = form(&c, "g", 2, SESSION_MS).await;
    let (a, b) = (&ids[0], &ids[1]);
    // A changes its subscription: a rebalance; B keeps heartbeating but never rejoins.
    let mut req = join_request("g", a, SESSION_MS, &[("range", "new-sub")]);
    req.rebalance_timeout_ms = 300;
    let pending = {
        let c = c.clone();
        tokio::spawn(async move { join(&c, 9, req).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        heartbeat(&c, "g", b, generation).await,
        Some(ResponseError::RebalanceInProgress)
    );
    // B's rebalance timeout is the longest (3 s): the join completes then, without B.
    let r = patiently(pending).await.unwrap();
    assert_eq!(error(r.error_code), None);
    let members: Vec<(&str, &[u8])> = r
        .members
        .iter()
        .map(|m| (m.member_id.as_str(), m.metadata.as_ref()))
        .collect();
    assert_eq!(members, [(a.as_str(), b"new-sub".as_slice())]);
    assert_eq!(
        heartbeat(&c, "g", b, generation).await,
        Some(ResponseError::UnknownMemberId)
    );
}

#[tokio::test]
async fn commits_by_a_stale_generation_or_a_stranger_are_refused() {
    let store = Arc::new(MemStore::default());
    let c = coordinator(store.clone(), limits());
    let (generation, _, ids) = form(&c, "g", 2, SESSION_MS).await;
    let a = &ids[0];
    let refused = |answers: BTreeMap<(String, i32), Option<ResponseError>>| answers.into_values().next().flatten();

    let stale = commit(&c, commit_request("g", a, generation - 1, &[("orders", 0, 5)])).await;
    assert_eq!(refused(stale), Some(ResponseError::IllegalGeneration));
    let stranger = commit(&c, commit_request("g", "someone", generation, &[("orders", 0, 5)])).await;
    assert_eq!(refused(stranger), Some(ResponseError::UnknownMemberId));
    // A commit with no generation is for groups without members (the admin client's reset).
    let simple = commit(&c, commit_request("g", "", -1, &[("orders", 0, 5)])).await;
    assert_eq!(refused(simple), Some(ResponseError::UnknownMemberId));
    assert!(store.groups.lock().unwrap().is_empty(), "nothing refused may be stored");
    assert_eq!(fetched(&c, "g").await, [(-1, -1), (-1, -1), (-1, -1)]);

    // The current generation commits; a partition the endpoint does not serve is refused on its own.
    let ok = commit(
        &c,
        commit_request(
            "g",
            a,
            generation,
            &[("orders", 0, 5), ("orders", 2, 9), ("orders", 7, 1), ("other", 0, 1)],
        ),
    )
    .await;
    let expected: BTreeMap<(String, i32), Option<ResponseError>> = [
        (("orders".into(), 0), None),
        (("orders".into(), 2), None),
        (("orders".into(), 7), Some(ResponseError::UnknownTopicOrPartition)),
        (("other".into(), 0), Some(ResponseError::UnknownTopicOrPartition)),
    ]
    .into();
    assert_eq!(ok, expected);
    assert_eq!(fetched(&c, "g").await, [(5, 7), (-1, -1), (9, 7)]);

    // Metadata over the cap and negative offsets are refused per partition.
    let mut req = commit_request("g", a, generation, &[("orders", 0, 6), ("orders", 1, -3)]);
    req.topics[0].partitions[0].committed_metadata = Some(s(&"x".repeat(4097)));
    let answers: Vec<_> = commit(&c, req).await.into_values().collect();
    assert_eq!(
        answers,
        [
            Some(ResponseError::OffsetMetadataTooLarge),
            Some(ResponseError::InvalidCommitOffsetSize)
        ]
    );
    assert_eq!(fetched(&c, "g").await, [(5, 7), (-1, -1), (9, 7)]);

    // During a rebalance the members of the generation still commit (as they give up partitions).
    let b = &ids[1];
    let r = c.leave_group(leave_request("g", &[b]), 3).await;
    assert_eq!(error(r.members[0].error_code), None);
    assert_eq!(c.group_state("g"), Some(GroupState::PreparingRebalance));
    let during = commit(&c, commit_request("g", a, generation, &[("orders", 1, 4)])).await;
    assert_eq!(refused(during), None);
    assert_eq!(fetched(&c, "g").await, [(5, 7), (4, 7), (9, 7)]);
}

#[tokio::test]
async fn commits_survive_a_new_coordinator_over_the_same_store() {
    let store = Arc::new(MemStore::default());
    {
        let c = coordinator(store.clone(), limits());
        let (generation, _, ids) = form(&c, "g", 1, SESSION_MS).await;
        let ok = commit(&c, commit_request("g", &ids[0], generation, &[("orders", 1, 42)])).await;
        assert!(ok.values().all(Option::is_none), "{ok:?}");
        // An admin's reset of a group without members.
        let ok = commit(&c, commit_request("reset", "", -1, &[("orders", 0, 3)])).await;
        assert!(ok.values().all(Option::is_none), "{ok:?}");
    }
    let c = coordinator(store.clone(), limits());
    assert_eq!(fetched(&c, "g").await, [(-1, -1), (42, 7), (-1, -1)]);
    assert_eq!(fetched(&c, "reset").await, [(3, 7), (-1, -1), (-1, -1)]);

    // The multi-group form (v8+), with "every partition" for one group.
    let mut req = OffsetFetchRequest::default();
    let mut g = OffsetFetchRequestGroup::default();
    g.group_id = gid("g");
    g.topics = None;
    let mut r = OffsetFetchRequestGroup::default();
    r.group_id = gid("reset");
    let mut t = kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopics::default();
    t.name = TopicName(s("orders"));
    t.partition_indexes = vec![0];
    r.topics = Some(vec![t]);
    req.groups = vec![g, r];
    let resp = c.offset_fetch(req, 9).await;
    encodes(&resp, 9);
    let all: Vec<(String, i32, i64, Option<String>)> = resp
        .groups
        .iter()
        .flat_map(|g| {
            g.topics.iter().flat_map(move |t| {
                t.partitions.iter().map(move |p| {
                    (
                        g.group_id.0.to_string(),
                        p.partition_index,
                        p.committed_offset,
                        p.metadata.as_ref().map(|m| m.to_string()),
                    )
                })
            })
        })
        .collect();
    assert_eq!(
        all,
        [
            ("g".into(), 1, 42, Some("meta".into())),
            ("reset".into(), 0, 3, Some("meta".into()))
        ]
    );

    // The groups are listed (Empty: no members since the restart) and described.
    let mut req = ListGroupsRequest::default();
    req.states_filter = vec![s("empty")];
    let listed = c.list_groups(req, 4).await;
    encodes(&listed, 4);
    let names: Vec<(&str, &str)> = listed
        .groups
        .iter()
        .map(|g| (g.group_id.0.as_str(), g.group_state.as_str()))
        .collect();
    assert_eq!(names, [("g", "Empty"), ("reset", "Empty")]);
    let mut req = ListGroupsRequest::default();
    req.states_filter = vec![s("Stable")];
    assert!(c.list_groups(req, 4).await.groups.is_empty());
    let mut req = DescribeGroupsRequest::default();
    req.groups = vec![gid("g"), gid("unknown")];
    let d = c.describe_groups(req, 6).await;
    encodes(&d, 6);
    assert_eq!(
        (error(d.groups[0].error_code), d.groups[0].group_state.as_str()),
        (None, "Empty")
    );
    assert_eq!(error(d.groups[1].error_code), Some(ResponseError::GroupIdNotFound));

    // A member of the group from before the restart is told to rejoin (at every version).
    for version in [8, 9] {
        let stale = commit_at(
            &c,
            commit_request("g", "consumer-old", 1, &[("orders", 1, 50)]),
            version,
        )
        .await;
        assert_eq!(
            stale.into_values().next().flatten(),
            Some(ResponseError::UnknownMemberId)
        );
    }
    assert_eq!(fetched(&c, "g").await, [(-1, -1), (42, 7), (-1, -1)]);
}

#[tokio::test]
async fn the_store_failing_is_a_retriable_error_and_nothing_is_acknowledged() {
    let store = Arc::new(MemStore::default());
    let c = coordinator(store.clone(), limits());
    store.failing.store(true, Ordering::SeqCst);
    let answers = commit(&c, commit_request("g", "", -1, &[("orders", 0, 1)])).await;
    assert_eq!(
        answers.into_values().next().flatten(),
        Some(ResponseError::CoordinatorNotAvailable)
    );
    let mut req = OffsetFetchRequest::default();
    req.group_id = gid("g");
    let r = c.offset_fetch(req, 7).await;
    assert_eq!(error(r.error_code), Some(ResponseError::CoordinatorNotAvailable));
    store.failing.store(false, Ordering::SeqCst);
    let answers = commit(&c, commit_request("g", "", -1, &[("orders", 0, 1)])).await;
    assert_eq!(answers.into_values().next().flatten(), None);
    assert_eq!(fetched(&c, "g").await[0], (1, 7));
}

#[tokio::test]
async fn joins_that_break_the_rules_are_refused_with_kafka_errors() {
    let c = coordinator(Arc::default(), limits());
    let refused = |r: JoinGroupResponse| error(r.error_code);
    assert_eq!(
        refused(join(&c, 9, join_request("", "", SESSION_MS, &[("range", "x")])).await),
        Some(ResponseError::InvalidGroupId)
    );
    assert_eq!(
        refused(join(&c, 9, join_request("g", "", 1, &[("range", "x")])).await),
        Some(ResponseError::InvalidSessionTimeout)
    );
    assert_eq!(
        refused(join(&c, 9, join_request("g", "", SESSION_MS, &[])).await),
        Some(ResponseError::InconsistentGroupProtocol)
    );
    assert_eq!(
        refused(join(&c, 9, join_request("g", "who", SESSION_MS, &[("range", "x")])).await),
        Some(ResponseError::UnknownMemberId)
    );
    // A member whose protocols share nothing with the group's.
    let (generation, leader, _) = form(&c, "g", 1, SESSION_MS).await;
    let id = member_id(&c, "g").await;
    assert_eq!(
        refused(join(&c, 9, join_request("g", &id, SESSION_MS, &[("sticky", "x")])).await),
        Some(ResponseError::InconsistentGroupProtocol)
    );
    // SyncGroup and Heartbeat from the wrong generation or a stranger.
    let r = sync(&c, sync_request("g", &leader, generation + 5, &[])).await;
    assert_eq!(error(r.error_code), Some(ResponseError::IllegalGeneration));
    let r = sync(&c, sync_request("g", "who", generation, &[])).await;
    assert_eq!(error(r.error_code), Some(ResponseError::UnknownMemberId));
    assert_eq!(
        heartbeat(&c, "nope", &leader, generation).await,
        Some(ResponseError::UnknownMemberId)
    );
    // JoinGroup v3 has no MEMBER_ID_REQUIRED: the first join is the join.
    let r = join(&c, 3, join_request("old", "", SESSION_MS, &[("range", "x")])).await;
    assert_eq!(error(r.error_code), None);
    assert_eq!(r.leader, r.member_id);
    assert_eq!(r.generation_id, 1);
}

#[tokio::test]
async fn the_protocol_every_member_supports_is_chosen_by_vote() {
    let c = coordinator(Arc::default(), limits());
    let a = member_id(&c, "g").await;
    let b = member_id(&c, "g").await;
    let cc = member_id(&c, "g").await;
    let subs = [
        (a.clone(), vec![("sticky", "a1"), ("range", "a2")]),
        (b.clone(), vec![("range", "b1"), ("sticky", "b2"), ("roundrobin", "b3")]),
        (cc.clone(), vec![("range", "c1"), ("sticky", "c2")]),
    ];
    let tasks: Vec<_> = subs
        .iter()
        .map(|(id, protocols)| {
            let c = c.clone();
            let req = join_request("g", id, SESSION_MS, protocols);
            tokio::spawn(async move { join(&c, 7, req).await })
        })
        .collect();
    let mut answers = Vec::new();
    for t in tasks {
        answers.push(t.await.unwrap());
    }
    for r in &answers {
        assert_eq!(
            r.protocol_name.as_ref().map(|p| p.as_str()),
            Some("range"),
            "two votes of three"
        );
    }
    // The leader (whoever joined first) sees each member's metadata for the chosen protocol.
    let leaders: Vec<&JoinGroupResponse> = answers.iter().filter(|r| !r.members.is_empty()).collect();
    assert_eq!(leaders.len(), 1);
    let mut metadata: Vec<&[u8]> = leaders[0].members.iter().map(|m| m.metadata.as_ref()).collect();
    metadata.sort();
    assert_eq!(metadata, [b"a2".as_slice(), b"b1", b"c1"]);
}

#[tokio::test]
async fn groups_members_and_sizes_are_capped() {
    let c = coordinator(
        Arc::default(),
        GroupLimits {
            max_groups: 1,
            max_members_per_group: 2,
            max_member_metadata_bytes: 64,
            max_assignment_bytes: 16,
            ..limits()
        },
    );
    member_id(&c, "g").await;
    member_id(&c, "g").await;
    let r = join(&c, 9, join_request("g", "", SESSION_MS, &[("range", "x")])).await;
    assert_eq!(error(r.error_code), Some(ResponseError::GroupMaxSizeReached));
    let r = join(&c, 9, join_request("h", "", SESSION_MS, &[("range", "x")])).await;
    assert_eq!(error(r.error_code), Some(ResponseError::CoordinatorNotAvailable));
    let r = join(&c, 9, join_request("g", "", SESSION_MS, &[("range", &"x".repeat(100))])).await;
    assert_eq!(error(r.error_code), Some(ResponseError::MessageTooLarge));

    // An assignment over the cap fails the leader's sync and starts another rebalance.
    let c = coordinator(
        Arc::default(),
        GroupLimits {
            max_assignment_bytes: 16,
            ..limits()
        },
    );
    let id = member_id(&c, "g").await;
    let joined = join_all(&c, "g", std::slice::from_ref(&id), SESSION_MS).await;
    let big = "y".repeat(17);
    let r = sync(&c, sync_request("g", &id, joined[0].generation_id, &[(&id, &big)])).await;
    assert_eq!(error(r.error_code), Some(ResponseError::MessageTooLarge));
    assert_eq!(c.group_state("g"), Some(GroupState::PreparingRebalance));
}

#[tokio::test]
async fn a_restarted_static_member_takes_over_its_instance_and_fences_the_old_one() {
    let c = coordinator(Arc::default(), limits());
    let static_join = |member: &str| {
        let mut r = join_request("g", member, SESSION_MS, &[("range", "s")]);
        r.group_instance_id = Some(s("host-1"));
        r
    };
    // A static member joins directly (no MEMBER_ID_REQUIRED), under an id made from its instance id.
    let first = join(&c, 9, static_join("")).await;
    assert_eq!(error(first.error_code), None);
    assert!(first.member_id.starts_with("host-1-"), "{}", first.member_id);
    let r = sync(&c, {
        let mut r = sync_request("g", &first.member_id, first.generation_id, &[(&first.member_id, "p")]);
        r.group_instance_id = Some(s("host-1"));
        r
    })
    .await;
    assert_eq!(error(r.error_code), None);

    // It restarts: the same instance id with no member id.
    let second = join(&c, 9, static_join("")).await;
    assert_eq!(error(second.error_code), None);
    assert_ne!(second.member_id, first.member_id);
    assert_eq!(second.leader, second.member_id);
    let mut hb = HeartbeatRequest::default();
    hb.group_id = gid("g");
    hb.member_id = first.member_id.clone();
    hb.generation_id = second.generation_id;
    hb.group_instance_id = Some(s("host-1"));
    assert_eq!(
        error(c.heartbeat(hb, 4).await.error_code),
        Some(ResponseError::FencedInstanceId)
    );

    // LeaveGroup by instance id alone.
    let mut req = LeaveGroupRequest::default();
    req.group_id = gid("g");
    let mut m = MemberIdentity::default();
    m.group_instance_id = Some(s("host-1"));
    req.members = vec![m];
    let r = c.leave_group(req, 4).await;
    encodes(&r, 4);
    assert_eq!(error(r.members[0].error_code), None);
}

#[tokio::test]
async fn a_group_with_members_cannot_be_deleted_an_empty_one_forgets_its_offsets() {
    let store = Arc::new(MemStore::default());
    let c = coordinator(store.clone(), limits());
    let (generation, _, ids) = form(&c, "g", 1, SESSION_MS).await;
    let ok = commit(&c, commit_request("g", &ids[0], generation, &[("orders", 0, 8)])).await;
    assert!(ok.values().all(Option::is_none));
    let delete = |names: &[&str]| {
        let mut req = DeleteGroupsRequest::default();
        req.groups_names = names.iter().map(|n| gid(n)).collect();
        req
    };
    let r = c.delete_groups(delete(&["g", "unknown", ""]), 2).await;
    encodes(&r, 2);
    let answers: Vec<_> = r.results.iter().map(|d| error(d.error_code)).collect();
    assert_eq!(
        answers,
        [
            Some(ResponseError::NonEmptyGroup),
            Some(ResponseError::GroupIdNotFound),
            Some(ResponseError::InvalidGroupId)
        ]
    );
    let r = c.leave_group(leave_request("g", &[&ids[0]]), 5).await;
    assert_eq!(error(r.members[0].error_code), None);
    let r = c.delete_groups(delete(&["g"]), 2).await;
    assert_eq!(error(r.results[0].error_code), None);
    assert!(store.groups.lock().unwrap().is_empty());
    assert_eq!(fetched(&c, "g").await, [(-1, -1), (-1, -1), (-1, -1)]);
}

#[tokio::test]
async fn an_unused_member_id_expires_with_its_session() {
    let c = coordinator(Arc::default(), limits());
    let r = join(&c, 9, join_request("g", "", 100, &[("range", "x")])).await;
    assert_eq!(error(r.error_code), Some(ResponseError::MemberIdRequired));
    assert_eq!(c.group_state("g"), Some(GroupState::Empty));
    patiently(async {
        while c.group_state("g").is_some() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    let r = join(&c, 9, join_request("g", &r.member_id, 100, &[("range", "x")])).await;
    assert_eq!(error(r.error_code), Some(ResponseError::UnknownMemberId));
}

#[tokio::test]
async fn responses_encode_at_every_version_they_answer() {
    let c = coordinator(Arc::default(), limits());
    for version in 0..=9 {
        let group = format!("v{version}");
        let mut first = join(&c, version, join_request(&group, "", SESSION_MS, &[("range", "x")])).await;
        if version >= 4 {
            first = join(
                &c,
                version,
                join_request(&group, &first.member_id, SESSION_MS, &[("range", "x")]),
            )
            .await;
        }
        assert_eq!(error(first.error_code), None, "v{version}");
        let sv = version.min(5);
        let mut req = sync_request(
            &group,
            &first.member_id,
            first.generation_id,
            &[(&first.member_id, "a")],
        );
        if sv < 5 {
            req.protocol_type = None;
            req.protocol_name = None;
        }
        let r = c.sync_group(req, sv).await;
        encodes(&r, sv);
        assert_eq!(error(r.error_code), None, "v{version}");
        for lv in 0..=5 {
            let r = c.leave_group(leave_request(&group, &["x"]), lv).await;
            encodes(&r, lv);
        }
        for fv in 1..=9 {
            let mut req = OffsetFetchRequest::default();
            req.group_id = gid(&group);
            if fv >= 8 {
                let mut g = OffsetFetchRequestGroup::default();
                g.group_id = gid(&group);
                req.groups = vec![g];
            }
            encodes(&c.offset_fetch(req, fv).await, fv);
        }
        for lv in 0..=5 {
            encodes(&c.list_groups(ListGroupsRequest::default(), lv).await, lv);
        }
        for dv in 0..=6 {
            let mut req = DescribeGroupsRequest::default();
            req.groups = vec![gid(&group), gid("none")];
            encodes(&c.describe_groups(req, dv).await, dv);
        }
    }
}

#[tokio::test]
async fn a_leader_that_never_sends_the_assignment_is_removed_and_the_waiting_follower_told_to_rejoin() {
    let c = coordinator(Arc::default(), limits());
    let a = member_id(&c, "g").await;
    let b = member_id(&c, "g").await;
    let tasks: Vec<_> = [&a, &b]
        .into_iter()
        .map(|id| {
            let c = c.clone();
            let mut req = join_request("g", id, SESSION_MS, &[("range", "x")]);
            req.rebalance_timeout_ms = 300;
            tokio::spawn(async move { join(&c, 9, req).await })
        })
        .collect();
    let mut joined = Vec::new();
    for t in tasks {
        joined.push(t.await.unwrap());
    }
    let leader = joined[0].leader.to_string();
    let follower = if leader == a { &b } else { &a };
    let started = tokio::time::Instant::now();
    let r = sync(&c, sync_request("g", follower, joined[0].generation_id, &[])).await;
    assert_eq!(error(r.error_code), Some(ResponseError::RebalanceInProgress));
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        heartbeat(&c, "g", &leader, joined[0].generation_id).await,
        Some(ResponseError::UnknownMemberId)
    );
    assert_eq!(c.group_state("g"), Some(GroupState::PreparingRebalance));
}

#[tokio::test]
async fn a_join_offering_too_many_protocols_is_refused() {
    let c = coordinator(
        Arc::default(),
        GroupLimits {
            max_protocols_per_member: 2,
            ..limits()
        },
    );
    let r = join(
        &c,
        9,
        join_request("g", "", SESSION_MS, &[("a", ""), ("b", ""), ("c", "")]),
    )
    .await;
    assert_eq!(error(r.error_code), Some(ResponseError::MessageTooLarge));
    let r = join(&c, 9, join_request("g", "", SESSION_MS, &[("a", ""), ("b", "")])).await;
    assert_eq!(error(r.error_code), Some(ResponseError::MemberIdRequired));
}
