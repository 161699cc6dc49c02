//! [`Coordinator`]: the group APIs as the handlers call them, decoded request and version in, response out.
//!
//! Why one lock over all groups: each operation is a few map updates (no I/O, no await under the lock), so one
//! `std::sync::Mutex` is simpler than per-group locks and never contended for long. Requests that Kafka holds
//! (JoinGroup until the rebalance completes, SyncGroup until the leader's assignment arrives) wait on a oneshot
//! channel outside the lock. Each group with members has one timer task that sleeps until the group's next
//! deadline (a session, the join or sync deadline, an unused member id) or until an operation wakes it, and
//! ends when the group is empty: tasks are bounded by [`GroupLimits::max_groups`].
//!
//! Stored metadata and assignments are copied out of the request frame (a slice would pin the whole frame), and
//! their total is capped by [`GroupLimits::max_total_bytes`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    DescribeGroupsRequest, DescribeGroupsResponse, GroupId, HeartbeatRequest, HeartbeatResponse, JoinGroupRequest,
    JoinGroupResponse, LeaveGroupRequest, LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, SyncGroupRequest,
    SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;
use tokio::sync::Notify;
use tokio::time::{Duration, Instant};

use super::state::{Group, GroupState, JoinParams, JoinReply, Step, SyncReply, Timing};
use super::{GroupLimits, OffsetStore};

/// Whether the endpoint serves a topic's partition: offsets are committed only for those.
pub type ServedPartition = Arc<dyn Fn(&str, i32) -> bool + Send + Sync>;

/// Who sent a request (from the request header and the connection), as DescribeGroups shows members.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientInfo {
    pub client_id: String,
    pub client_host: String,
}

/// How many locks serialize the store writes of groups (by a hash of the group id): commits of one group are
/// applied in the order they arrive, commits of different groups mostly in parallel.
const COMMIT_LOCKS: usize = 16;

/// Characters of a client id or instance id kept in a generated member id.
const MEMBER_ID_PREFIX_CHARS: usize = 128;

/// The classic group coordinator of one endpoint. Cheap to clone (the clones share the groups).
#[derive(Clone)]
pub struct Coordinator {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub store: Arc<dyn OffsetStore>,
    pub link: String,
    pub served: ServedPartition,
    pub limits: GroupLimits,
    state: Mutex<State>,
    commit_locks: Vec<tokio::sync::Mutex<()>>,
    ids: std::collections::hash_map::RandomState,
}

#[derive(Default)]
pub(super) struct State {
    groups: HashMap<String, Live>,
    /// Bytes held for all groups' members.
    held: usize,
    /// The groups with stored offsets, read from the store once and kept current by commits and deletes.
    pub stored: Option<HashSet<String>>,
    next_incarnation: u64,
    next_member: u64,
}

struct Live {
    group: Group,
    bytes: usize,
    /// Tells this group's timer task from the task of an earlier group of the same name.
    incarnation: u64,
    wake: Arc<Notify>,
}

impl Coordinator {
    /// A coordinator with the default [`GroupLimits`]. `link` names the link in logs; `served` says which
    /// partitions offsets may be committed for.
    pub fn new(store: Arc<dyn OffsetStore>, link: String, served: ServedPartition) -> Self {
        Self::with_limits(store, link, served, GroupLimits::default())
    }

    pub fn with_limits(
        store: Arc<dyn OffsetStore>,
        link: String,
        served: ServedPartition,
        limits: GroupLimits,
    ) -> Self {
        Coordinator {
            inner: Arc::new(Inner {
                store,
                link,
                served,
                limits,
                state: Mutex::new(State::default()),
                commit_locks: (0..COMMIT_LOCKS).map(|_| tokio::sync::Mutex::new(())).collect(),
                ids: Default::default(),
            }),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock means a bug panicked while holding it; the maps are still consistent enough to serve.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn commit_lock(&self, group: &str) -> &tokio::sync::Mutex<()> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        group.hash(&mut h);
        &self.inner.commit_locks[(h.finish() as usize) % COMMIT_LOCKS]
    }

    fn timing(&self) -> Timing {
        Timing {
            initial_rebalance_delay: self.inner.limits.initial_rebalance_delay,
        }
    }

    /// A group id Kafka would accept here: not empty, and not longer than the limit.
    pub(super) fn valid_group_id(&self, group: &str) -> bool {
        !group.is_empty() && group.chars().count() <= self.inner.limits.max_group_id_len
    }

    /// Kafka's member id: the client id (or the static member's instance id), a dash, and a random UUID.
    fn new_member_id(&self, st: &mut State, prefix: &str) -> String {
        st.next_member += 1;
        let a = self.inner.ids.hash_one((st.next_member, std::time::SystemTime::now()));
        let b = self.inner.ids.hash_one((a, st.next_member));
        let prefix: String = prefix.chars().take(MEMBER_ID_PREFIX_CHARS).collect();
        format!(
            "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xffff,
            b >> 48,
            b & 0xffff_ffff_ffff
        )
    }

    /// Runs `f` on the group (if it exists), then brings the byte count up to date and wakes the group's timer.
    fn on_group<R>(&self, st: &mut State, id: &str, f: impl FnOnce(&mut Group, usize) -> R) -> Option<R> {
        let room = self.inner.limits.max_total_bytes.saturating_sub(st.held);
        let live = st.groups.get_mut(id)?;
        let r = f(&mut live.group, room);
        let bytes = live.group.bytes();
        st.held = st.held.saturating_sub(live.bytes).saturating_add(bytes);
        live.bytes = bytes;
        live.wake.notify_one();
        Some(r)
    }

    /// Creates an empty group and its timer task.
    fn create_group(&self, st: &mut State, id: &str) {
        st.next_incarnation += 1;
        let incarnation = st.next_incarnation;
        let wake = Arc::new(Notify::new());
        st.groups.insert(
            id.to_owned(),
            Live {
                group: Group::new(id.to_owned()),
                bytes: 0,
                incarnation,
                wake: wake.clone(),
            },
        );
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(drive(self.clone(), id.to_owned(), incarnation, wake));
            }
            Err(e) => tracing::error!(group = id, "group timer not started (no async runtime): {e}"),
        }
    }

    /// JoinGroup, from an unnamed client (see [`Coordinator::join_group_from`]).
    pub async fn join_group(&self, req: JoinGroupRequest, version: i16) -> JoinGroupResponse {
        self.join_group_from(req, version, &ClientInfo::default()).await
    }

    /// JoinGroup: answered when the rebalance completes (or at once: a new member id, an error, the current
    /// generation for a member that lost its answer).
    pub async fn join_group_from(&self, req: JoinGroupRequest, version: i16, client: &ClientInfo) -> JoinGroupResponse {
        let reply = match self.join_params(&req, version, client) {
            Err(e) => JoinReply::error(e, req.member_id.as_str()),
            Ok(p) => match self.join_step(req.group_id.0.as_str(), p) {
                Step::Now(reply) => reply,
                Step::Wait(rx) => rx
                    .await
                    .unwrap_or_else(|_| JoinReply::error(ResponseError::CoordinatorNotAvailable, &req.member_id)),
            },
        };
        join_response(reply, version)
    }

    fn join_params(
        &self,
        req: &JoinGroupRequest,
        version: i16,
        client: &ClientInfo,
    ) -> Result<JoinParams, ResponseError> {
        let limits = &self.inner.limits;
        if !self.valid_group_id(req.group_id.0.as_str()) {
            return Err(ResponseError::InvalidGroupId);
        }
        let session = u64::try_from(req.session_timeout_ms)
            .map(Duration::from_millis)
            .map_err(|_| ResponseError::InvalidSessionTimeout)?;
        if session < limits.min_session_timeout || session > limits.max_session_timeout {
            return Err(ResponseError::InvalidSessionTimeout);
        }
        // JoinGroup v0 has no rebalance timeout: the session timeout is used, as Kafka does.
        let rebalance = match u64::try_from(req.rebalance_timeout_ms) {
            Ok(ms) if version >= 1 && ms > 0 => Duration::from_millis(ms),
            _ => session,
        }
        .min(limits.max_rebalance_timeout);
        if req.protocols.len() > limits.max_protocols_per_member {
            return Err(ResponseError::MessageTooLarge);
        }
        let mut protocols: Vec<(String, Bytes)> = Vec::with_capacity(req.protocols.len());
        let mut size = 0usize;
        for p in &req.protocols {
            size = size.saturating_add(p.name.len()).saturating_add(p.metadata.len());
            if size > limits.max_member_metadata_bytes {
                return Err(ResponseError::MessageTooLarge);
            }
            // A protocol named twice counts once (the first), as in Kafka's keyed collection.
            if !protocols.iter().any(|(n, _)| n == p.name.as_str()) {
                protocols.push((p.name.to_string(), Bytes::copy_from_slice(&p.metadata)));
            }
        }
        Ok(JoinParams {
            member_id: req.member_id.to_string(),
            instance_id: req.group_instance_id.as_ref().map(|s| s.to_string()),
            client_id: client.client_id.chars().take(limits.max_group_id_len).collect(),
            client_host: client.client_host.chars().take(limits.max_group_id_len).collect(),
            session_timeout: session,
            rebalance_timeout: rebalance,
            protocol_type: req.protocol_type.to_string(),
            protocols,
            require_known_member_id: version >= 4,
        })
    }

    fn join_step(&self, group_id: &str, p: JoinParams) -> Step<JoinReply> {
        let now = Instant::now();
        let mut st = self.lock();
        if !st.groups.contains_key(group_id) {
            if !p.member_id.is_empty() {
                return Step::Now(JoinReply::error(ResponseError::UnknownMemberId, &p.member_id));
            }
            if st.groups.len() >= self.inner.limits.max_groups {
                tracing::debug!(link = %self.inner.link, group = group_id, "join refused: too many groups");
                return Step::Now(JoinReply::error(ResponseError::CoordinatorNotAvailable, ""));
            }
            self.create_group(&mut st, group_id);
        }
        let id = self.new_member_id(&mut st, p.instance_id.as_deref().unwrap_or(&p.client_id));
        let timing = self.timing();
        let max_members = self.inner.limits.max_members_per_group;
        let member_id = p.member_id.clone();
        self.on_group(&mut st, group_id, |g, room| {
            g.join(p, now, timing, max_members, room, |_| id)
        })
        .unwrap_or_else(|| Step::Now(JoinReply::error(ResponseError::CoordinatorNotAvailable, &member_id)))
    }

    /// SyncGroup: the leader's assignment for each member, once the leader sent it.
    pub async fn sync_group(&self, req: SyncGroupRequest, version: i16) -> SyncGroupResponse {
        let outcome = if !self.valid_group_id(req.group_id.0.as_str()) {
            Err(ResponseError::InvalidGroupId)
        } else {
            let max = self.inner.limits.max_assignment_bytes;
            let assignments: Vec<(String, Bytes)> = req
                .assignments
                .iter()
                .map(|a| (a.member_id.to_string(), Bytes::copy_from_slice(&a.assignment)))
                .collect();
            let step = {
                let now = Instant::now();
                let timing = self.timing();
                let mut st = self.lock();
                let protocol = (
                    req.protocol_type.as_ref().map(|s| s.as_str()),
                    req.protocol_name.as_ref().map(|s| s.as_str()),
                );
                let instance = req.group_instance_id.as_ref().map(|s| s.as_str());
                self.on_group(&mut st, req.group_id.0.as_str(), |g, room| {
                    g.sync(
                        &req.member_id,
                        instance,
                        req.generation_id,
                        protocol,
                        assignments,
                        now,
                        timing,
                        max,
                        room,
                    )
                })
            };
            match step {
                None => Err(ResponseError::UnknownMemberId),
                Some(Step::Now(outcome)) => outcome,
                Some(Step::Wait(rx)) => rx.await.unwrap_or(Err(ResponseError::CoordinatorNotAvailable)),
            }
        };
        sync_response(outcome, version)
    }

    /// Heartbeat.
    pub async fn heartbeat(&self, req: HeartbeatRequest, _version: i16) -> HeartbeatResponse {
        let result = if !self.valid_group_id(req.group_id.0.as_str()) {
            Err(ResponseError::InvalidGroupId)
        } else {
            let now = Instant::now();
            let mut st = self.lock();
            let instance = req.group_instance_id.as_ref().map(|s| s.as_str());
            self.on_group(&mut st, req.group_id.0.as_str(), |g, _| {
                g.heartbeat(&req.member_id, instance, req.generation_id, now)
            })
            .unwrap_or(Err(ResponseError::UnknownMemberId))
        };
        let mut r = HeartbeatResponse::default();
        r.error_code = code(result.err());
        r
    }

    /// LeaveGroup: one member (v0-2) or a batch (v3+); the group rebalances once.
    pub async fn leave_group(&self, req: LeaveGroupRequest, version: i16) -> LeaveGroupResponse {
        let mut r = LeaveGroupResponse::default();
        if !self.valid_group_id(req.group_id.0.as_str()) {
            r.error_code = ResponseError::InvalidGroupId.code();
            return r;
        }
        let leaving: Vec<(String, Option<String>)> = if version >= 3 {
            req.members
                .iter()
                .map(|m| {
                    (
                        m.member_id.to_string(),
                        m.group_instance_id.as_ref().map(|s| s.to_string()),
                    )
                })
                .collect()
        } else {
            vec![(req.member_id.to_string(), None)]
        };
        let answers = {
            let now = Instant::now();
            let timing = self.timing();
            let mut st = self.lock();
            self.on_group(&mut st, req.group_id.0.as_str(), |g, _| g.leave(&leaving, now, timing))
                .unwrap_or_else(|| vec![Err(ResponseError::UnknownMemberId); leaving.len()])
        };
        if version >= 3 {
            r.members = leaving
                .into_iter()
                .zip(answers)
                .map(|((member_id, instance_id), answer)| {
                    let mut m = MemberResponse::default();
                    m.member_id = StrBytes::from_string(member_id);
                    m.group_instance_id = instance_id.map(StrBytes::from_string);
                    m.error_code = code(answer.err());
                    m
                })
                .collect();
        } else {
            r.error_code = code(answers.into_iter().next().and_then(Result::err));
        }
        r
    }

    /// ListGroups: groups with members, and groups known only by their stored offsets (`Empty`).
    pub async fn list_groups(&self, req: ListGroupsRequest, version: i16) -> ListGroupsResponse {
        let mut r = ListGroupsResponse::default();
        if let Err(e) = self.load_stored().await {
            tracing::warn!(link = %self.inner.link, "listing groups: the offset store failed: {e}");
            r.error_code = ResponseError::CoordinatorNotAvailable.code();
        }
        let mut all: BTreeMap<String, (GroupState, String)> = BTreeMap::new();
        {
            let st = self.lock();
            for (id, live) in &st.groups {
                let protocol_type = live.group.protocol_type.clone().unwrap_or_default();
                all.insert(id.clone(), (live.group.state, protocol_type));
            }
            for id in st.stored.iter().flatten() {
                all.entry(id.clone()).or_insert((GroupState::Empty, String::new()));
            }
        }
        let states: Vec<String> = if version >= 4 {
            req.states_filter.iter().map(|s| s.to_ascii_lowercase()).collect()
        } else {
            Vec::new()
        };
        let classic_wanted = version < 5
            || req.types_filter.is_empty()
            || req.types_filter.iter().any(|t| t.eq_ignore_ascii_case("classic"));
        if !classic_wanted {
            return r;
        }
        r.groups = all
            .into_iter()
            .filter(|(_, (state, _))| states.is_empty() || states.contains(&state.name().to_ascii_lowercase()))
            .map(|(id, (state, protocol_type))| {
                let mut g = ListedGroup::default();
                g.group_id = GroupId(StrBytes::from_string(id));
                g.protocol_type = StrBytes::from_string(protocol_type);
                if version >= 4 {
                    g.group_state = StrBytes::from_static_str(state.name());
                }
                if version >= 5 {
                    g.group_type = StrBytes::from_static_str("classic");
                }
                g
            })
            .collect();
        r
    }

    /// DescribeGroups: state, protocol and members (with subscriptions and assignments once `Stable`). A group
    /// named twice is described once, so that one request cannot multiply the bytes held into its response.
    pub async fn describe_groups(&self, req: DescribeGroupsRequest, version: i16) -> DescribeGroupsResponse {
        let stored_ok = self.load_stored().await.is_ok();
        let mut r = DescribeGroupsResponse::default();
        let mut seen = HashSet::new();
        let st = self.lock();
        r.groups = req
            .groups
            .iter()
            .filter(|id| seen.insert(id.0.as_str()))
            .map(|id| {
                let mut d = DescribedGroup::default();
                d.group_id = id.clone();
                let id = id.0.as_str();
                if !self.valid_group_id(id) {
                    d.error_code = ResponseError::InvalidGroupId.code();
                    return d;
                }
                if let Some(live) = st.groups.get(id) {
                    describe(&live.group, version, &mut d);
                } else if st.stored.as_ref().is_some_and(|s| s.contains(id)) {
                    d.group_state = StrBytes::from_static_str(GroupState::Empty.name());
                } else if !stored_ok {
                    d.error_code = ResponseError::CoordinatorNotAvailable.code();
                } else if version >= 6 {
                    d.error_code = ResponseError::GroupIdNotFound.code();
                    d.error_message = Some(StrBytes::from_string(format!("Group {id} not found.")));
                } else {
                    d.group_state = StrBytes::from_static_str("Dead");
                }
                d
            })
            .collect();
        r
    }

    /// Reads the groups with stored offsets once (a blocking call on the blocking pool).
    pub(super) async fn load_stored(&self) -> Result<(), String> {
        if self.lock().stored.is_some() {
            return Ok(());
        }
        let store = self.inner.store.clone();
        let groups = tokio::task::spawn_blocking(move || store.groups())
            .await
            .map_err(|e| format!("offset store task failed: {e}"))??;
        let mut st = self.lock();
        if st.stored.is_none() {
            st.stored = Some(groups.into_iter().collect());
        }
        Ok(())
    }

    /// Whether `group` has members or members being admitted.
    pub(super) fn has_members(&self, group: &str) -> bool {
        self.lock().groups.get(group).is_some_and(|l| l.group.size() > 0)
    }

    /// OffsetCommit's group check, under the lock (see `Group::validate_commit`). A group without members in
    /// memory takes only commits with no generation; a member's commit gets UNKNOWN_MEMBER_ID, as from a broker
    /// that knows the group but not the member. Why not Kafka's answer for a group it does not know
    /// (GROUP_ID_NOT_FOUND from v9): membership is not kept across a restart of the endpoint, where a broker keeps
    /// it in `__consumer_offsets`, so the members of a group that was live before the restart would be told their
    /// group is gone, which the classic Java consumer treats as fatal; UNKNOWN_MEMBER_ID makes them rejoin.
    pub(super) fn validate_commit(
        &self,
        group: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), ResponseError> {
        let now = Instant::now();
        let mut st = self.lock();
        match self.on_group(&mut st, group, |g, _| {
            g.validate_commit(member_id, instance_id, generation, now)
        }) {
            Some(result) => result,
            None if generation < 0 => Ok(()),
            None => Err(ResponseError::UnknownMemberId),
        }
    }

    /// The state of a group in memory, if it has one (for tests and status).
    pub fn group_state(&self, group: &str) -> Option<GroupState> {
        self.lock().groups.get(group).map(|l| l.group.state)
    }
}

fn describe(g: &Group, version: i16, d: &mut DescribedGroup) {
    d.group_state = StrBytes::from_static_str(g.state.name());
    d.protocol_type = StrBytes::from_string(g.protocol_type.clone().unwrap_or_default());
    let stable = g.state == GroupState::Stable;
    let protocol = g.protocol.clone().unwrap_or_default();
    if stable {
        d.protocol_data = StrBytes::from_string(protocol.clone());
    }
    d.members = g
        .ordered()
        .into_iter()
        .map(|m| {
            let mut dm = DescribedGroupMember::default();
            dm.member_id = StrBytes::from_string(m.id.clone());
            if version >= 4 {
                dm.group_instance_id = m.instance_id.clone().map(StrBytes::from_string);
            }
            dm.client_id = StrBytes::from_string(m.client_id.clone());
            dm.client_host = StrBytes::from_string(m.client_host.clone());
            if stable {
                dm.member_metadata = m
                    .protocols
                    .iter()
                    .find(|(n, _)| *n == protocol)
                    .map(|(_, meta)| meta.clone())
                    .unwrap_or_default();
                dm.member_assignment = m.assignment.clone();
            }
            dm
        })
        .collect();
}

/// The timer task of one group: expires sessions and deadlines, and forgets the group once it is empty.
async fn drive(coordinator: Coordinator, group_id: String, incarnation: u64, wake: Arc<Notify>) {
    let timing = coordinator.timing();
    loop {
        let next = {
            let mut st = coordinator.lock();
            let st = &mut *st;
            let Some(live) = st.groups.get_mut(&group_id) else {
                return;
            };
            if live.incarnation != incarnation {
                return;
            }
            live.group.expire(Instant::now(), timing);
            let bytes = live.group.bytes();
            st.held = st.held.saturating_sub(live.bytes).saturating_add(bytes);
            live.bytes = bytes;
            if live.group.removable() {
                st.held = st.held.saturating_sub(bytes);
                st.groups.remove(&group_id);
                return;
            }
            live.group.next_deadline()
        };
        match next {
            Some(at) => {
                // Never a busy loop, whatever a deadline computes to.
                let at = at.max(Instant::now() + Duration::from_millis(1));
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}

pub(super) fn code(error: Option<ResponseError>) -> i16 {
    error.map_or(0, |e| e.code())
}

fn join_response(reply: JoinReply, version: i16) -> JoinGroupResponse {
    let mut r = JoinGroupResponse::default();
    r.error_code = code(reply.error);
    r.generation_id = reply.generation;
    if version >= 7 {
        r.protocol_type = reply.protocol_type.map(StrBytes::from_string);
        r.protocol_name = reply.protocol_name.map(StrBytes::from_string);
    } else {
        r.protocol_name = Some(StrBytes::from_string(reply.protocol_name.unwrap_or_default()));
    }
    r.leader = StrBytes::from_string(reply.leader);
    r.member_id = StrBytes::from_string(reply.member_id);
    r.members = reply
        .members
        .into_iter()
        .map(|m| {
            let mut jm = JoinGroupResponseMember::default();
            jm.member_id = StrBytes::from_string(m.member_id);
            if version >= 5 {
                jm.group_instance_id = m.instance_id.map(StrBytes::from_string);
            }
            jm.metadata = m.metadata;
            jm
        })
        .collect();
    r
}

fn sync_response(outcome: Result<SyncReply, ResponseError>, version: i16) -> SyncGroupResponse {
    let mut r = SyncGroupResponse::default();
    match outcome {
        Ok(reply) => {
            if version >= 5 {
                r.protocol_type = reply.protocol_type.map(StrBytes::from_string);
                r.protocol_name = reply.protocol_name.map(StrBytes::from_string);
            }
            r.assignment = reply.assignment;
        }
        Err(e) => r.error_code = e.code(),
    }
    r
}
