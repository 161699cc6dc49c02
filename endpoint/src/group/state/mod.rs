//! One classic group's state machine: members, generations, the rebalance, and the deadlines that drive it.
//!
//! Why separate from the coordinator: the rules (who may join, when a rebalance completes, who is expelled) are
//! Kafka's classic group rules and are easiest to check without locks, tasks or sockets. The coordinator holds
//! every group under one lock, calls these methods with the current time, and wakes the group's timer task when
//! a deadline moved. Nothing here blocks, sleeps or panics; requests waiting for the rebalance hold a oneshot
//! receiver whose sender the member keeps.
//!
//! The states, as a broker names them: `Empty` (no members), `PreparingRebalance` (members rejoin; JoinGroup
//! answers are held until every known member rejoined or the rebalance timeout passed), `CompletingRebalance`
//! (the new generation is formed; SyncGroup answers are held until the leader sends the assignment) and
//! `Stable`.
//!
//! This module admits members and drives the rebalance; [`members`] answers the members it knows (sync,
//! heartbeat, leave, the commit check) and runs the timer.

use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use tokio::sync::oneshot;
use tokio::time::{Duration, Instant};

mod members;

/// A group's state, as Kafka names it in ListGroups and DescribeGroups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl GroupState {
    /// Kafka's name of the state.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
        }
    }
}

/// What a member waiting in JoinGroup receives (or is answered at once).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JoinReply {
    pub error: Option<ResponseError>,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub member_id: String,
    /// The members and their subscriptions: for the leader only.
    pub members: Vec<MemberMeta>,
}

impl JoinReply {
    pub fn error(error: ResponseError, member_id: &str) -> Self {
        JoinReply {
            error: Some(error),
            generation: -1,
            protocol_type: None,
            protocol_name: None,
            leader: String::new(),
            member_id: member_id.to_owned(),
            members: Vec::new(),
        }
    }
}

/// One member as the leader sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MemberMeta {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub metadata: Bytes,
}

/// What a member waiting in SyncGroup receives: its assignment, with the group's protocol.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SyncReply {
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

pub(crate) type SyncOutcome = Result<SyncReply, ResponseError>;

/// An answer now, or one to wait for.
pub(crate) enum Step<T> {
    Now(T),
    Wait(oneshot::Receiver<T>),
}

/// A JoinGroup request, checked and decoded.
#[derive(Debug, Clone)]
pub(crate) struct JoinParams {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// JoinGroup v4+ from a dynamic member: the first join only hands out the member id.
    pub require_known_member_id: bool,
}

impl JoinParams {
    /// The bytes this member would hold.
    pub fn bytes(&self) -> usize {
        self.protocols.iter().map(|(n, m)| n.len() + m.len()).sum::<usize>()
            + self.client_id.len()
            + self.client_host.len()
            + self.instance_id.as_ref().map_or(0, String::len)
    }
}

/// The timings a group needs from the coordinator's limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub initial_rebalance_delay: Duration,
}

pub(crate) struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout: Duration,
    pub rebalance_timeout: Duration,
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    awaiting_join: Option<oneshot::Sender<JoinReply>>,
    awaiting_sync: Option<oneshot::Sender<SyncOutcome>>,
    last_heartbeat: Instant,
    /// Join order: the leader is the earliest member that rejoined.
    seq: u64,
}

impl Member {
    fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|(n, _)| n == protocol)
    }

    fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(n, _)| n == protocol)
            .map(|(_, m)| m.clone())
            .unwrap_or_default()
    }

    fn bytes(&self) -> usize {
        self.id.len()
            + self.instance_id.as_ref().map_or(0, String::len)
            + self.client_id.len()
            + self.client_host.len()
            + self.protocols.iter().map(|(n, m)| n.len() + m.len()).sum::<usize>()
            + self.assignment.len()
    }

    fn fail_waiters(&mut self, error: ResponseError) {
        if let Some(tx) = self.awaiting_join.take() {
            let _ = tx.send(JoinReply::error(error, &self.id));
        }
        if let Some(tx) = self.awaiting_sync.take() {
            let _ = tx.send(Err(error));
        }
    }

    /// A member waiting for a join or sync answer is not expected to heartbeat; the rebalance deadlines bound it.
    fn expires_at(&self) -> Option<Instant> {
        if self.awaiting_join.is_some() || self.awaiting_sync.is_some() {
            None
        } else {
            Some(self.last_heartbeat + self.session_timeout)
        }
    }
}

/// One group.
pub(crate) struct Group {
    pub id: String,
    pub state: GroupState,
    pub generation: i32,
    pub protocol_type: Option<String>,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub members: HashMap<String, Member>,
    /// Member ids handed out by MEMBER_ID_REQUIRED, until the member joins with it (or the session timeout).
    pub pending: HashMap<String, Instant>,
    /// Static members: group instance id → member id.
    statics: HashMap<String, String>,
    /// Members of the new generation that have not sent SyncGroup yet.
    pending_sync: HashSet<String>,
    join_deadline: Option<Instant>,
    /// Set while the first rebalance of an empty group waits for more members: the latest it may wait until.
    initial_cap: Option<Instant>,
    sync_deadline: Option<Instant>,
    next_seq: u64,
}

impl Group {
    pub fn new(id: String) -> Self {
        Group {
            id,
            state: GroupState::Empty,
            generation: 0,
            protocol_type: None,
            protocol: None,
            leader: None,
            members: HashMap::new(),
            pending: HashMap::new(),
            statics: HashMap::new(),
            pending_sync: HashSet::new(),
            join_deadline: None,
            initial_cap: None,
            sync_deadline: None,
            next_seq: 0,
        }
    }

    /// Bytes held for this group's members.
    pub fn bytes(&self) -> usize {
        self.members.values().map(Member::bytes).sum::<usize>() + self.pending.keys().map(String::len).sum::<usize>()
    }

    /// No members, none being admitted: the group can be forgotten (its offsets stay in the store).
    pub fn removable(&self) -> bool {
        self.state == GroupState::Empty && self.members.is_empty() && self.pending.is_empty()
    }

    /// Members, admitted or being admitted.
    pub fn size(&self) -> usize {
        self.members.len() + self.pending.len()
    }

    /// The members in join order.
    pub fn ordered(&self) -> Vec<&Member> {
        let mut all: Vec<&Member> = self.members.values().collect();
        all.sort_by_key(|m| m.seq);
        all
    }

    /// Whether a member with these protocols may be in the group (with `except`'s own protocols left out, for a
    /// member that rejoins with new ones): a protocol type and at least one protocol, the group's protocol type,
    /// and a protocol every other member supports.
    fn supports(&self, protocol_type: &str, protocols: &[(String, Bytes)], except: Option<&str>) -> bool {
        if protocol_type.is_empty() || protocols.is_empty() {
            return false;
        }
        let mut others = self
            .members
            .values()
            .filter(|m| Some(m.id.as_str()) != except)
            .peekable();
        if others.peek().is_none() {
            return true;
        }
        if self.protocol_type.as_deref() != Some(protocol_type) {
            return false;
        }
        let others: Vec<&Member> = others.collect();
        protocols
            .iter()
            .any(|(name, _)| others.iter().all(|m| m.supports(name)))
    }

    /// Kafka's member check: a static member by its instance id (another member id under it is fenced), a
    /// dynamic one by its member id.
    pub fn validate_member(&self, member_id: &str, instance_id: Option<&str>) -> Result<(), ResponseError> {
        match instance_id {
            Some(instance) => match self.statics.get(instance) {
                None => Err(ResponseError::UnknownMemberId),
                Some(id) if id != member_id => Err(ResponseError::FencedInstanceId),
                Some(_) => Ok(()),
            },
            None if self.members.contains_key(member_id) => Ok(()),
            None => Err(ResponseError::UnknownMemberId),
        }
    }

    fn max_rebalance_timeout(&self) -> Duration {
        self.members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or(Duration::ZERO)
    }

    /// JoinGroup. `room`: how many more bytes the coordinator may hold; `new_id` makes a member id from a prefix.
    pub fn join(
        &mut self,
        p: JoinParams,
        now: Instant,
        timing: Timing,
        max_members: usize,
        room: usize,
        new_id: impl FnOnce(&str) -> String,
    ) -> Step<JoinReply> {
        let refuse = |e, id: &str| Step::Now(JoinReply::error(e, id));
        if p.member_id.is_empty() {
            if !self.supports(&p.protocol_type, &p.protocols, None) {
                return refuse(ResponseError::InconsistentGroupProtocol, "");
            }
            let replaced = p.instance_id.as_ref().and_then(|i| self.statics.get(i)).cloned();
            let freed = replaced
                .as_ref()
                .and_then(|id| self.members.get(id))
                .map_or(0, Member::bytes);
            if replaced.is_none() && self.size() >= max_members {
                return refuse(ResponseError::GroupMaxSizeReached, "");
            }
            if p.bytes() > freed.saturating_add(room) {
                return refuse(ResponseError::CoordinatorNotAvailable, "");
            }
            let id = new_id(p.instance_id.as_deref().unwrap_or(&p.client_id));
            if let Some(old_id) = replaced {
                // A static member restarted: the new member id takes over its instance id and its place (the
                // leader's role included), the old one is fenced.
                let was_leader = self.leader.as_deref() == Some(old_id.as_str());
                self.remove_member(&old_id, ResponseError::FencedInstanceId);
                let rx = self.add_member(&p, id.clone(), now);
                if was_leader {
                    self.leader = Some(id);
                }
                self.after_join(now, timing);
                return Step::Wait(rx);
            }
            if p.instance_id.is_none() && p.require_known_member_id {
                self.pending.insert(id.clone(), now + p.session_timeout);
                return refuse(ResponseError::MemberIdRequired, &id);
            }
            let rx = self.add_member(&p, id, now);
            self.after_join(now, timing);
            return Step::Wait(rx);
        }

        if self.pending.contains_key(&p.member_id) {
            if !self.supports(&p.protocol_type, &p.protocols, None) {
                return refuse(ResponseError::InconsistentGroupProtocol, &p.member_id);
            }
            if p.bytes() > room {
                return refuse(ResponseError::CoordinatorNotAvailable, &p.member_id);
            }
            self.pending.remove(&p.member_id);
            let rx = self.add_member(&p, p.member_id.clone(), now);
            self.after_join(now, timing);
            return Step::Wait(rx);
        }
        if let Err(e) = self.validate_member(&p.member_id, p.instance_id.as_deref()) {
            return refuse(e, &p.member_id);
        }
        if !self.supports(&p.protocol_type, &p.protocols, Some(&p.member_id)) {
            return refuse(ResponseError::InconsistentGroupProtocol, &p.member_id);
        }
        let Some(member) = self.members.get(&p.member_id) else {
            return refuse(ResponseError::UnknownMemberId, &p.member_id);
        };
        if p.bytes() > member.bytes().saturating_add(room) {
            return refuse(ResponseError::CoordinatorNotAvailable, &p.member_id);
        }
        let same_protocols = member.protocols == p.protocols;
        let is_leader = self.leader.as_deref() == Some(p.member_id.as_str());
        match self.state {
            GroupState::Empty => refuse(ResponseError::UnknownMemberId, &p.member_id),
            GroupState::PreparingRebalance => {
                let rx = self.update_member(&p, now);
                self.maybe_complete_join(now);
                Step::Wait(rx)
            }
            // The member lost the answer to its join: the same one again.
            GroupState::CompletingRebalance if same_protocols => {
                self.touch(&p.member_id, now);
                Step::Now(self.current_join_reply(&p.member_id))
            }
            // A follower rejoining with what it had needs no rebalance.
            GroupState::Stable if same_protocols && !is_leader => {
                self.touch(&p.member_id, now);
                Step::Now(self.current_join_reply(&p.member_id))
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                let rx = self.update_member(&p, now);
                self.prepare_rebalance(now, timing);
                Step::Wait(rx)
            }
        }
    }

    fn add_member(&mut self, p: &JoinParams, id: String, now: Instant) -> oneshot::Receiver<JoinReply> {
        let (tx, rx) = oneshot::channel();
        if self.members.is_empty() {
            self.protocol_type = Some(p.protocol_type.clone());
        }
        if self.leader.is_none() {
            self.leader = Some(id.clone());
        }
        if let Some(instance) = &p.instance_id {
            self.statics.insert(instance.clone(), id.clone());
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        self.members.insert(
            id.clone(),
            Member {
                id,
                instance_id: p.instance_id.clone(),
                client_id: p.client_id.clone(),
                client_host: p.client_host.clone(),
                session_timeout: p.session_timeout,
                rebalance_timeout: p.rebalance_timeout,
                protocols: p.protocols.clone(),
                assignment: Bytes::new(),
                awaiting_join: Some(tx),
                awaiting_sync: None,
                last_heartbeat: now,
                seq,
            },
        );
        rx
    }

    /// A known member's new join: its protocols and timeouts replace the old ones; a join it still waits on is
    /// superseded (answered REBALANCE_IN_PROGRESS).
    fn update_member(&mut self, p: &JoinParams, now: Instant) -> oneshot::Receiver<JoinReply> {
        let (tx, rx) = oneshot::channel();
        if self.members.len() == 1 {
            // The only member decides the group's protocol type.
            self.protocol_type = Some(p.protocol_type.clone());
        }
        if let Some(m) = self.members.get_mut(&p.member_id) {
            if let Some(old) = m.awaiting_join.replace(tx) {
                let _ = old.send(JoinReply::error(ResponseError::RebalanceInProgress, &p.member_id));
            }
            m.protocols = p.protocols.clone();
            m.session_timeout = p.session_timeout;
            m.rebalance_timeout = p.rebalance_timeout;
            m.client_id = p.client_id.clone();
            m.client_host = p.client_host.clone();
            m.last_heartbeat = now;
        }
        rx
    }

    fn touch(&mut self, member_id: &str, now: Instant) {
        if let Some(m) = self.members.get_mut(member_id) {
            m.last_heartbeat = now;
        }
    }

    fn after_join(&mut self, now: Instant, timing: Timing) {
        match self.state {
            GroupState::Empty | GroupState::CompletingRebalance | GroupState::Stable => {
                self.prepare_rebalance(now, timing)
            }
            GroupState::PreparingRebalance => match self.initial_cap {
                Some(cap) => self.join_deadline = Some((now + timing.initial_rebalance_delay).min(cap)),
                None => self.maybe_complete_join(now),
            },
        }
    }

    fn prepare_rebalance(&mut self, now: Instant, timing: Timing) {
        if self.state == GroupState::CompletingRebalance {
            for m in self.members.values_mut() {
                m.assignment = Bytes::new();
                if let Some(tx) = m.awaiting_sync.take() {
                    let _ = tx.send(Err(ResponseError::RebalanceInProgress));
                }
            }
        }
        let was_empty = self.state == GroupState::Empty;
        self.state = GroupState::PreparingRebalance;
        self.pending_sync.clear();
        self.sync_deadline = None;
        let timeout = self.max_rebalance_timeout();
        if was_empty {
            let cap = now + timeout;
            self.initial_cap = Some(cap);
            self.join_deadline = Some((now + timing.initial_rebalance_delay).min(cap));
        } else {
            self.initial_cap = None;
            self.join_deadline = Some(now + timeout);
            self.maybe_complete_join(now);
        }
    }

    /// Completes the join phase early once every known member rejoined and nobody is being admitted (never
    /// during the initial delay, which exists to wait for members not known yet).
    fn maybe_complete_join(&mut self, now: Instant) {
        if self.state == GroupState::PreparingRebalance
            && self.initial_cap.is_none()
            && self.pending.is_empty()
            && self.members.values().all(|m| m.awaiting_join.is_some())
        {
            self.complete_join(now);
        }
    }

    fn next_generation(&mut self) {
        self.generation = self.generation.checked_add(1).unwrap_or(1);
    }

    fn complete_join(&mut self, now: Instant) {
        self.initial_cap = None;
        self.join_deadline = None;
        // Dynamic members that did not rejoin in time are out; static ones keep their place (and their last
        // subscription) until their session times out.
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none() && m.instance_id.is_none())
            .map(|m| m.id.clone())
            .collect();
        for id in gone {
            self.remove_member(&id, ResponseError::UnknownMemberId);
        }
        if self.members.is_empty() {
            self.next_generation();
            self.state = GroupState::Empty;
            self.protocol = None;
            self.leader = None;
            return;
        }
        let leader_rejoined = self
            .leader
            .as_ref()
            .and_then(|l| self.members.get(l))
            .is_some_and(|m| m.awaiting_join.is_some());
        if !leader_rejoined {
            match self.ordered().into_iter().find(|m| m.awaiting_join.is_some()) {
                Some(m) => self.leader = Some(m.id.clone()),
                None => {
                    // Only absent static members are left: wait for them (or their session timeout) again.
                    self.join_deadline = Some(now + self.max_rebalance_timeout());
                    return;
                }
            }
        }
        let Some(protocol) = self.select_protocol() else {
            // The absent static members' old subscriptions share no protocol with the rest: start over.
            let ids: Vec<String> = self.members.keys().cloned().collect();
            for id in ids {
                self.remove_member(&id, ResponseError::InconsistentGroupProtocol);
            }
            self.next_generation();
            self.state = GroupState::Empty;
            self.protocol = None;
            self.leader = None;
            return;
        };
        self.next_generation();
        self.protocol = Some(protocol);
        self.state = GroupState::CompletingRebalance;
        let ids: Vec<String> = self.ordered().iter().map(|m| m.id.clone()).collect();
        for id in &ids {
            let reply = self.current_join_reply(id);
            if let Some(m) = self.members.get_mut(id) {
                m.last_heartbeat = now;
                if let Some(tx) = m.awaiting_join.take() {
                    let _ = tx.send(reply);
                }
            }
        }
        self.pending_sync = ids.into_iter().collect();
        self.sync_deadline = Some(now + self.max_rebalance_timeout());
    }

    /// The protocol every member supports that most members prefer (ties: the earliest member's order).
    fn select_protocol(&self) -> Option<String> {
        let members = self.ordered();
        let first = members.first()?;
        let candidates: Vec<&str> = first
            .protocols
            .iter()
            .map(|(n, _)| n.as_str())
            .filter(|n| members.iter().all(|m| m.supports(n)))
            .collect();
        let mut best: Option<(&str, usize)> = None;
        for candidate in &candidates {
            let votes = members
                .iter()
                .filter(|m| {
                    m.protocols
                        .iter()
                        .find(|(n, _)| candidates.contains(&n.as_str()))
                        .is_some_and(|(n, _)| n == candidate)
                })
                .count();
            if best.is_none_or(|(_, most)| votes > most) {
                best = Some((candidate, votes));
            }
        }
        best.map(|(n, _)| n.to_owned())
    }

    /// The current generation's join answer for `member_id` (the member list for the leader only).
    fn current_join_reply(&self, member_id: &str) -> JoinReply {
        let protocol = self.protocol.clone().unwrap_or_default();
        let is_leader = self.leader.as_deref() == Some(member_id);
        let members = if is_leader {
            self.ordered()
                .into_iter()
                .map(|m| MemberMeta {
                    member_id: m.id.clone(),
                    instance_id: m.instance_id.clone(),
                    metadata: m.metadata(&protocol),
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinReply {
            error: None,
            generation: self.generation,
            protocol_type: self.protocol_type.clone(),
            protocol_name: Some(protocol),
            leader: self.leader.clone().unwrap_or_default(),
            member_id: member_id.to_owned(),
            members,
        }
    }

    /// Removes a member (its waiting requests answered `error`); the leader role passes to the earliest member.
    /// No rebalance: the caller decides ([`Group::after_removal`]).
    fn remove_member(&mut self, member_id: &str, error: ResponseError) -> bool {
        let Some(mut m) = self.members.remove(member_id) else {
            return false;
        };
        m.fail_waiters(error);
        if let Some(instance) = &m.instance_id {
            if self.statics.get(instance).map(String::as_str) == Some(member_id) {
                self.statics.remove(instance);
            }
        }
        self.pending_sync.remove(member_id);
        if self.leader.as_deref() == Some(member_id) {
            self.leader = self.ordered().first().map(|m| m.id.clone());
        }
        true
    }

    /// After members left: a formed generation rebalances, a rebalance under way may now be complete.
    fn after_removal(&mut self, now: Instant, timing: Timing) {
        match self.state {
            GroupState::Stable | GroupState::CompletingRebalance => self.prepare_rebalance(now, timing),
            GroupState::PreparingRebalance => self.maybe_complete_join(now),
            GroupState::Empty => {}
        }
    }
}
