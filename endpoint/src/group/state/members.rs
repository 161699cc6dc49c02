//! What members do once in a group (SyncGroup, Heartbeat, LeaveGroup, the group check of OffsetCommit), and
//! the timer that expires sessions and deadlines.
//!
//! Why apart from the join: these are the group's answers to members it already knows, each a check against the
//! current generation followed by at most one state change; the join and the rebalance it drives are the parent
//! module's.

use bytes::Bytes;
use kafka_protocol::error::ResponseError;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Group, GroupState, Member, Step, SyncOutcome, SyncReply, Timing};

impl Group {
    /// SyncGroup. `room` as for [`Group::join`].
    #[allow(clippy::too_many_arguments)]
    pub fn sync(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        protocol: (Option<&str>, Option<&str>),
        assignments: Vec<(String, Bytes)>,
        now: Instant,
        timing: Timing,
        max_assignment_bytes: usize,
        room: usize,
    ) -> Step<SyncOutcome> {
        if let Err(e) = self.validate_member(member_id, instance_id) {
            return Step::Now(Err(e));
        }
        if generation != self.generation {
            return Step::Now(Err(ResponseError::IllegalGeneration));
        }
        let (protocol_type, protocol_name) = protocol;
        if protocol_type.is_some_and(|t| self.protocol_type.as_deref() != Some(t))
            || protocol_name.is_some_and(|n| self.protocol.as_deref() != Some(n))
        {
            return Step::Now(Err(ResponseError::InconsistentGroupProtocol));
        }
        self.sync_member(member_id, assignments, now, timing, (max_assignment_bytes, room))
    }

    fn sync_member(
        &mut self,
        member_id: &str,
        assignments: Vec<(String, Bytes)>,
        now: Instant,
        timing: Timing,
        (max_assignment_bytes, room): (usize, usize),
    ) -> Step<SyncOutcome> {
        self.touch(member_id, now);
        match self.state {
            GroupState::Empty => Step::Now(Err(ResponseError::UnknownMemberId)),
            GroupState::PreparingRebalance => Step::Now(Err(ResponseError::RebalanceInProgress)),
            GroupState::Stable => {
                self.synced(member_id);
                Step::Now(Ok(self.sync_reply(member_id)))
            }
            GroupState::CompletingRebalance => {
                self.synced(member_id);
                let (tx, rx) = oneshot::channel();
                if let Some(m) = self.members.get_mut(member_id) {
                    // A repeated SyncGroup supersedes the one still waiting.
                    if let Some(old) = m.awaiting_sync.replace(tx) {
                        let _ = old.send(Err(ResponseError::RebalanceInProgress));
                    }
                }
                if self.leader.as_deref() == Some(member_id) {
                    let held: usize = self.members.values().map(|m| m.assignment.len()).sum();
                    let offered: usize = assignments
                        .iter()
                        .filter(|(id, _)| self.members.contains_key(id))
                        .map(|(_, a)| a.len())
                        .sum();
                    if assignments.iter().any(|(_, a)| a.len() > max_assignment_bytes)
                        || offered > held.saturating_add(room)
                    {
                        if let Some(tx) = self.members.get_mut(member_id).and_then(|m| m.awaiting_sync.take()) {
                            let _ = tx.send(Err(ResponseError::MessageTooLarge));
                        }
                        self.prepare_rebalance(now, timing);
                        return Step::Wait(rx);
                    }
                    for m in self.members.values_mut() {
                        m.assignment = Bytes::new();
                    }
                    for (id, assignment) in assignments {
                        if let Some(m) = self.members.get_mut(&id) {
                            m.assignment = assignment;
                        }
                    }
                    self.state = GroupState::Stable;
                    let ids: Vec<String> = self.members.keys().cloned().collect();
                    for id in ids {
                        let reply = self.sync_reply(&id);
                        if let Some(tx) = self.members.get_mut(&id).and_then(|m| m.awaiting_sync.take()) {
                            let _ = tx.send(Ok(reply));
                        }
                    }
                }
                Step::Wait(rx)
            }
        }
    }

    fn synced(&mut self, member_id: &str) {
        self.pending_sync.remove(member_id);
        if self.pending_sync.is_empty() {
            self.sync_deadline = None;
        }
    }

    fn sync_reply(&self, member_id: &str) -> SyncReply {
        SyncReply {
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol.clone(),
            assignment: self
                .members
                .get(member_id)
                .map(|m| m.assignment.clone())
                .unwrap_or_default(),
        }
    }

    /// Heartbeat: NONE while the generation holds, REBALANCE_IN_PROGRESS while members must rejoin.
    pub fn heartbeat(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> Result<(), ResponseError> {
        self.validate_member(member_id, instance_id)?;
        if generation != self.generation {
            return Err(ResponseError::IllegalGeneration);
        }
        match self.state {
            GroupState::Empty => Err(ResponseError::UnknownMemberId),
            GroupState::PreparingRebalance => {
                self.touch(member_id, now);
                Err(ResponseError::RebalanceInProgress)
            }
            GroupState::CompletingRebalance | GroupState::Stable => {
                self.touch(member_id, now);
                Ok(())
            }
        }
    }

    /// LeaveGroup for each (member id, instance id); one answer each, then one rebalance if anyone left.
    pub fn leave(
        &mut self,
        leaving: &[(String, Option<String>)],
        now: Instant,
        timing: Timing,
    ) -> Vec<Result<(), ResponseError>> {
        let mut any = false;
        let answers = leaving
            .iter()
            .map(|(member_id, instance_id)| {
                let id = match instance_id {
                    Some(instance) => match self.statics.get(instance) {
                        None => return Err(ResponseError::UnknownMemberId),
                        Some(id) if !member_id.is_empty() && id != member_id => {
                            return Err(ResponseError::FencedInstanceId)
                        }
                        Some(id) => id.clone(),
                    },
                    None => member_id.clone(),
                };
                if self.pending.remove(&id).is_some() {
                    any = true;
                    return Ok(());
                }
                if self.remove_member(&id, ResponseError::UnknownMemberId) {
                    any = true;
                    Ok(())
                } else {
                    Err(ResponseError::UnknownMemberId)
                }
            })
            .collect();
        if any {
            self.after_removal(now, timing);
        }
        answers
    }

    /// OffsetCommit's group check (Kafka's): a commit with no generation and no member is allowed while the group
    /// has no members; otherwise the member must belong to the current generation, and not while the generation
    /// awaits its assignment. A member's commit counts as a heartbeat.
    pub fn validate_commit(
        &mut self,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
        now: Instant,
    ) -> Result<(), ResponseError> {
        if generation < 0 && self.state == GroupState::Empty {
            return Ok(());
        }
        if generation >= 0 || !member_id.is_empty() || instance_id.is_some() {
            self.validate_member(member_id, instance_id)?;
            if generation != self.generation {
                return Err(ResponseError::IllegalGeneration);
            }
        } else if self.state != GroupState::Empty {
            return Err(ResponseError::UnknownMemberId);
        }
        if self.state == GroupState::CompletingRebalance {
            return Err(ResponseError::RebalanceInProgress);
        }
        self.touch(member_id, now);
        Ok(())
    }

    /// The timer: admissions and sessions that ran out, the join and sync deadlines.
    pub fn expire(&mut self, now: Instant, timing: Timing) {
        let before = self.pending.len();
        self.pending.retain(|_, deadline| *deadline > now);
        let mut removed = self.pending.len() != before;
        let expired: Vec<String> = self
            .members
            .values()
            .filter(|m| m.expires_at().is_some_and(|at| at <= now))
            .map(|m| m.id.clone())
            .collect();
        for id in expired {
            tracing::debug!(group = %self.id, member = %id, "session timed out: member removed");
            removed |= self.remove_member(&id, ResponseError::UnknownMemberId);
        }
        if removed {
            self.after_removal(now, timing);
        }
        if self.state == GroupState::PreparingRebalance && self.join_deadline.is_some_and(|d| d <= now) {
            self.complete_join(now);
        }
        if matches!(self.state, GroupState::CompletingRebalance | GroupState::Stable)
            && !self.pending_sync.is_empty()
            && self.sync_deadline.is_some_and(|d| d <= now)
        {
            let late: Vec<String> = self.pending_sync.drain().collect();
            for id in late {
                tracing::debug!(group = %self.id, member = %id, "no SyncGroup within the rebalance timeout");
                self.remove_member(&id, ResponseError::RebalanceInProgress);
            }
            self.after_removal(now, timing);
        }
    }

    /// When [`Group::expire`] next has something to do.
    pub fn next_deadline(&self) -> Option<Instant> {
        let join = self
            .join_deadline
            .filter(|_| self.state == GroupState::PreparingRebalance);
        let sync = self.sync_deadline.filter(|_| !self.pending_sync.is_empty());
        self.pending
            .values()
            .copied()
            .chain(self.members.values().filter_map(Member::expires_at))
            .chain(join)
            .chain(sync)
            .min()
    }
}
