//! Helpers for the unclean-election tests on a [`KafkaCluster`]: a topic placed on chosen nodes, and waits on a
//! partition's metadata (leader, in-sync replicas) to reach a state the test names.
//!
//! Why a topic on chosen nodes: an unclean election needs the leader alone in the ISR, then dead, then a replica
//! that is not in the ISR coming back. A partition replicated on two brokers gives exactly that sequence, and the
//! third broker stays up as a bystander that serves the cluster's internal topics (replication factor 3,
//! `min.insync.replicas` 2) while both replicas are down.

use std::collections::BTreeMap;

use anyhow::Result;
use serde_json::json;

use crate::clients::run_python;
use crate::cluster::{KafkaCluster, PartitionState, LEADER_MOVE_TIMEOUT};
use crate::wait::wait_for;

/// How often the metadata is asked while waiting for a partition state.
const METADATA_POLL: std::time::Duration = std::time::Duration::from_millis(300);

/// Creates `name` with one partition per entry of `assignment` (the node ids holding it, the preferred leader
/// first) and `configs` as topic configs; returns once every partition has a leader.
pub fn create_topic_on(
    cluster: &mut KafkaCluster,
    name: &str,
    assignment: &[Vec<i32>],
    configs: &[(&str, String)],
) -> Result<()> {
    let config: BTreeMap<&str, &str> = configs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let request = json!({
        "bootstrap": cluster.bootstrap(),
        "create": [{"name": name, "replica_assignment": assignment, "config": config}],
    });
    run_python("admin", &request).map(drop)
}

/// Waits until `topic`-`partition`'s metadata satisfies `ok` (`what` says what in the failure message); returns the
/// state that did.
pub fn wait_partition(
    cluster: &mut KafkaCluster,
    topic: &str,
    partition: i32,
    what: &str,
    ok: impl Fn(&PartitionState) -> bool,
) -> Result<PartitionState> {
    wait_for(
        &format!("{topic}-{partition}: {what}"),
        LEADER_MOVE_TIMEOUT,
        METADATA_POLL,
        || {
            // While nodes restart the metadata may not be served at all; that is "not yet", not a failure.
            Ok(cluster.partition(topic, partition).ok().filter(|s| ok(s)))
        },
    )
}
