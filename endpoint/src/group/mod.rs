//! The classic consumer-group coordinator, and the committed offsets it keeps through an [`OffsetStore`].
//!
//! Why the endpoint coordinates groups itself: stock consumers that `subscribe` (the Java consumer, librdkafka,
//! `kafka-console-consumer --group`) find a coordinator (the endpoint answers "this node"), join a group, have
//! its leader assign the partitions, heartbeat, and commit their positions. Without a coordinator they could only
//! `assign` partitions by hand. The protocol is Kafka's classic one (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups), with the broker's semantics: member ids
//! handed out on the first join (MEMBER_ID_REQUIRED from JoinGroup v4), generations, a leader that receives the
//! members' subscriptions and returns the assignment, rebalances when a member joins, leaves or stops
//! heartbeating, and commits refused from a stale generation.
//!
//! What is kept where: membership lives in memory only, as in a broker that restarts (after a restart of
//! `serve` the consumers' heartbeats get UNKNOWN_MEMBER_ID and they rejoin). Committed offsets are durable: the
//! service stores them in the catalog, so they survive a restart and `segmirror failover` can commit them on the
//! target cluster.
//!
//! Bounds: every dimension a client controls is capped by [`GroupLimits`] (groups, members per group, metadata and
//! assignment sizes, bytes held in all, groups with stored offsets); beyond a cap the request gets a Kafka error
//! and nothing grows.
//!
//! - `state`: one group's state machine (pure, no I/O, no locks).
//! - `coordinator`: [`Coordinator`], the async API the handlers call: locking, timers, responses per version.
//! - `offsets`: OffsetCommit, OffsetFetch and DeleteGroups over the store.

mod coordinator;
mod offsets;
mod state;

use std::time::Duration;

pub use coordinator::{ClientInfo, Coordinator, ServedPartition};
pub use state::GroupState;

/// One committed offset of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// The leader epoch the client committed with, -1 when none.
    pub leader_epoch: i32,
    pub metadata: String,
}

/// Where committed offsets are kept durably (the service implements it over the catalog). Blocking calls: the
/// coordinator makes them on tokio's blocking pool.
pub trait OffsetStore: Send + Sync + 'static {
    /// Record `offsets` for `group`, all or nothing.
    fn commit(&self, group: &str, offsets: &[CommittedOffset]) -> Result<(), String>;
    /// Every offset `group` committed.
    fn fetch(&self, group: &str) -> Result<Vec<CommittedOffset>, String>;
    /// The groups with committed offsets.
    fn groups(&self) -> Result<Vec<String>, String>;
    /// Forget every offset `group` committed (DeleteGroups). A store that cannot delete says so, and the client
    /// is told the group cannot be deleted now.
    fn delete(&self, group: &str) -> Result<(), String> {
        Err(format!("this offset store cannot delete group {group:?}"))
    }
}

/// The caps and timings of a [`Coordinator`]. The defaults are Kafka's where Kafka has one, except the initial
/// rebalance delay (Kafka's 3 s `group.initial.rebalance.delay.ms` makes every first join of a test wait).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupLimits {
    /// How long the first rebalance of an empty group waits for more members to join before it completes (each
    /// new member extends it, up to the rebalance timeout), so that consumers started together form one
    /// generation instead of one rebalance each.
    pub initial_rebalance_delay: Duration,
    /// The session timeouts a member may ask for (Kafka's `group.min.session.timeout.ms` and
    /// `group.max.session.timeout.ms`); outside them JoinGroup answers INVALID_SESSION_TIMEOUT.
    pub min_session_timeout: Duration,
    pub max_session_timeout: Duration,
    /// The longest a rebalance waits for members to rejoin or sync: a member asking for more gets this (Kafka
    /// has no cap; without one a client could hold a group and its slots for the 24 days an `i32` allows).
    pub max_rebalance_timeout: Duration,
    /// Protocols (assignors) one member may offer; beyond, MESSAGE_TOO_LARGE (clients offer a handful).
    pub max_protocols_per_member: usize,
    /// Groups with members (or members being admitted) at once; a join that would create one more gets
    /// COORDINATOR_NOT_AVAILABLE (retriable: a group that empties frees its place).
    pub max_groups: usize,
    /// Members (admitted or being admitted) per group; beyond, GROUP_MAX_SIZE_REACHED.
    pub max_members_per_group: usize,
    /// Bytes of one member's join (protocol names and subscription metadata) and of one member's assignment;
    /// beyond, MESSAGE_TOO_LARGE.
    pub max_member_metadata_bytes: usize,
    pub max_assignment_bytes: usize,
    /// Bytes of metadata and assignments held for all groups together; a join or assignment that would exceed it
    /// gets COORDINATOR_NOT_AVAILABLE.
    pub max_total_bytes: usize,
    /// Groups with stored offsets; a commit that would add a group beyond gets COORDINATOR_NOT_AVAILABLE.
    pub max_stored_groups: usize,
    /// Bytes of a committed offset's metadata string (Kafka's `offset.metadata.max.bytes`); beyond,
    /// OFFSET_METADATA_TOO_LARGE for that partition.
    pub max_offset_metadata_bytes: usize,
    /// Characters of a group id; a longer one is INVALID_GROUP_ID (it would be a catalog key).
    pub max_group_id_len: usize,
}

impl Default for GroupLimits {
    fn default() -> Self {
        GroupLimits {
            initial_rebalance_delay: Duration::from_millis(200),
            min_session_timeout: Duration::from_secs(6),
            max_session_timeout: Duration::from_secs(30 * 60),
            max_rebalance_timeout: Duration::from_secs(30 * 60),
            max_protocols_per_member: 64,
            max_groups: 10_000,
            max_members_per_group: 1_000,
            max_member_metadata_bytes: 1 << 20,
            max_assignment_bytes: 1 << 20,
            max_total_bytes: 256 << 20,
            max_stored_groups: 10_000,
            max_offset_metadata_bytes: 4096,
            max_group_id_len: 1024,
        }
    }
}

#[cfg(test)]
mod tests;
