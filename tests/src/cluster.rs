//! A real 3-broker KRaft Kafka cluster ([`KafkaCluster`]): the source of the direct tail's cluster mode, where every
//! partition has a replica on each broker, leadership moves when a broker dies, and one shipper runs beside each
//! broker reading that broker's own log dir; and the 3-replica target of a promotion.
//!
//! Why three brokers and one dedicated controller (four JVMs, the controller a small one), as production clusters
//! run, rather than three combined `broker,controller` nodes: a broker's clean shutdown asks the active controller
//! for a controlled shutdown and waits for the answer (up to five minutes). With combined nodes, stopping all three
//! races: the nodes whose brokers were answered first take their controllers down with them, and the last broker
//! is left without a quorum to answer it (a CI run saw exactly that). With a separate controller, the brokers stop
//! first and the controller last ([`KafkaCluster::stop_all`]), and killing any brokers never costs the quorum.
//! Each node is a [`KafkaBroker`] (install, config, ports, format and start-up code are that module's); this
//! module only chooses all ports first, launches every node before waiting for any, and asks the cluster's
//! metadata through the Python client (an implementation independent of segmirror's own `Metadata` code, which
//! the tests check against it).
//!
//! Failure detection is shortened (broker session 3 s instead of 9 s, replica lag 5 s instead of 30 s) so that a
//! killed leader's partitions move within seconds.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use serde_json::json;

use crate::broker::{random_cluster_id, BrokerConfig, KafkaBroker, NodeRole};
use crate::clients::run_python;
use crate::ports::free_port;
use crate::wait::wait_for;

/// Brokers in a cluster: the smallest that survives the loss of one (replication factor 3 with
/// `min.insync.replicas` 2 still accepting `acks=all` writes).
pub const CLUSTER_NODES: usize = 3;
/// Heap per broker: four JVMs on a small test machine.
pub const CLUSTER_HEAP_MB: u32 = 320;
/// Heap of the controller (metadata only).
pub const CONTROLLER_HEAP_MB: u32 = 192;
/// `node.id` of the controller; the brokers are 1, 2 and 3.
pub const CONTROLLER_NODE_ID: i32 = 0;
/// `broker.session.timeout.ms`: how long the controller waits for a silent broker's heartbeat before fencing it
/// and moving its leaderships (Kafka's default 9 s would make every failover test wait that long).
pub const BROKER_SESSION_TIMEOUT_MS: u32 = 3000;
/// `broker.heartbeat.interval.ms`: well under the session timeout.
pub const BROKER_HEARTBEAT_INTERVAL_MS: u32 = 500;
/// `replica.lag.time.max.ms`: a follower that stopped fetching leaves the ISR after this (default 30 s).
pub const REPLICA_LAG_TIME_MAX_MS: u32 = 5000;
/// How long leadership may take to move after a kill (session timeout plus an election, with slack for two busy
/// cores).
pub const LEADER_MOVE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often metadata is asked while waiting for it to change.
const METADATA_POLL: Duration = Duration::from_millis(300);

/// How to start a cluster.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Name prefix of the nodes' work dirs and log messages (`<name>-<node id>`).
    pub name: String,
    /// `unclean.leader.election.enable` for every topic (default false: only an in-sync replica becomes leader).
    pub unclean_leader_election: bool,
    /// `server.properties` entries for every node, over the cluster defaults.
    pub properties: BTreeMap<String, String>,
}

impl ClusterConfig {
    pub fn new(name: &str) -> Self {
        ClusterConfig {
            name: name.to_string(),
            unclean_leader_election: false,
            properties: BTreeMap::new(),
        }
    }

    pub fn unclean_leader_election(mut self, enable: bool) -> Self {
        self.unclean_leader_election = enable;
        self
    }

    pub fn property(mut self, key: &str, value: impl ToString) -> Self {
        self.properties.insert(key.to_string(), value.to_string());
        self
    }
}

/// One partition as the cluster's metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct PartitionState {
    /// Node id of the leader; -1: none.
    pub leader: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// A running KRaft cluster of three brokers (node ids 1, 2 and 3) and a controller (node id 0, not among
/// [`node_ids`](KafkaCluster::node_ids)). Dropping it kills every node.
pub struct KafkaCluster {
    /// Index i holds node id i + 1.
    nodes: Vec<KafkaBroker>,
    controller: KafkaBroker,
    cluster_id: String,
}

impl KafkaCluster {
    /// Formats and starts the controller and the three brokers; returns once each serves.
    pub fn start(config: ClusterConfig) -> Result<KafkaCluster> {
        let cluster_id = random_cluster_id()?;
        let controller_port = free_port()?;
        let voters = format!("{CONTROLLER_NODE_ID}@127.0.0.1:{controller_port}");
        // The cluster's own settings for a node, then the test's, which win.
        let with_test_properties = |mut node: BrokerConfig| {
            for (k, v) in &config.properties {
                node = node.property(k, v);
            }
            node
        };
        // Every node gets the cluster-wide defaults: the controller applies them too (it creates topics with
        // `default.replication.factor` and decides unclean elections by `unclean.leader.election.enable`).
        let node = |name: String, role: NodeRole, node_id: i32| {
            BrokerConfig::new(&name)
                .role(role)
                .cluster_id(&cluster_id)
                .property("node.id", node_id)
                .property("controller.quorum.voters", &voters)
                .property("broker.session.timeout.ms", BROKER_SESSION_TIMEOUT_MS)
                .property("broker.heartbeat.interval.ms", BROKER_HEARTBEAT_INTERVAL_MS)
                .property("default.replication.factor", CLUSTER_NODES)
                .property("min.insync.replicas", 2)
                .property("offsets.topic.replication.factor", CLUSTER_NODES)
                .property("transaction.state.log.replication.factor", CLUSTER_NODES)
                .property("transaction.state.log.min.isr", 2)
                .property("unclean.leader.election.enable", config.unclean_leader_election)
                .property("replica.lag.time.max.ms", REPLICA_LAG_TIME_MAX_MS)
        };
        let controller = node(
            format!("{}-controller", config.name),
            NodeRole::Controller,
            CONTROLLER_NODE_ID,
        )
        .heap_mb(CONTROLLER_HEAP_MB)
        .ports(free_port()?, controller_port);
        let mut controller =
            KafkaBroker::spawn(with_test_properties(controller)).context("launching the controller")?;
        let mut nodes = Vec::with_capacity(CLUSTER_NODES);
        for i in 0..CLUSTER_NODES {
            let node_id = i as i32 + 1;
            let broker = node(format!("{}-{node_id}", config.name), NodeRole::Broker, node_id)
                .heap_mb(CLUSTER_HEAP_MB)
                .ports(free_port()?, controller_port);
            nodes.push(
                KafkaBroker::spawn(with_test_properties(broker))
                    .with_context(|| format!("launching node {node_id}"))?,
            );
        }
        controller.wait_until_started()?;
        for node in &mut nodes {
            node.wait_until_started()?;
        }
        Ok(KafkaCluster {
            nodes,
            controller,
            cluster_id,
        })
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// Node ids, in order (1, 2, 3).
    pub fn node_ids(&self) -> Vec<i32> {
        (1..=self.nodes.len() as i32).collect()
    }

    /// The node with this id.
    pub fn node(&self, id: i32) -> Result<&KafkaBroker> {
        usize::try_from(id - 1)
            .ok()
            .and_then(|i| self.nodes.get(i))
            .with_context(|| format!("no node {id} in a cluster of {}", self.nodes.len()))
    }

    pub fn node_mut(&mut self, id: i32) -> Result<&mut KafkaBroker> {
        let len = self.nodes.len();
        usize::try_from(id - 1)
            .ok()
            .and_then(|i| self.nodes.get_mut(i))
            .with_context(|| format!("no node {id} in a cluster of {len}"))
    }

    /// The bootstrap list of the nodes running now (comma-separated `host:port`).
    pub fn bootstrap(&mut self) -> String {
        self.nodes
            .iter_mut()
            .filter_map(|n| n.is_running().then(|| n.bootstrap()))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Creates a topic with replication factor 3 on every node, `configs` as topic configs; returns once every
    /// partition has a leader.
    pub fn create_topic(&mut self, name: &str, partitions: i32, configs: &[(&str, String)]) -> Result<()> {
        let config: BTreeMap<&str, &str> = configs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let request = json!({
            "bootstrap": self.bootstrap(),
            "create": [{"name": name, "partitions": partitions, "replication_factor": CLUSTER_NODES, "config": config}],
        });
        run_python("admin", &request).map(drop)
    }

    /// Each partition of `topic` as the metadata says now.
    pub fn partitions(&mut self, topic: &str) -> Result<BTreeMap<i32, PartitionState>> {
        let request = json!({"bootstrap": self.bootstrap(), "topics": [topic]});
        let out = run_python("leaders", &request)?;
        let mut all: BTreeMap<String, BTreeMap<String, PartitionState>> =
            serde_json::from_str(out.trim()).with_context(|| format!("leaders output {out:?}"))?;
        let parts = all
            .remove(topic)
            .with_context(|| format!("no topic {topic} in {out}"))?;
        parts
            .into_iter()
            .map(|(p, s)| Ok((p.parse::<i32>().with_context(|| format!("partition {p:?}"))?, s)))
            .collect()
    }

    /// The partition's state, failing if the metadata does not list it.
    pub fn partition(&mut self, topic: &str, partition: i32) -> Result<PartitionState> {
        self.partitions(topic)?
            .remove(&partition)
            .with_context(|| format!("no partition {topic}-{partition} in the metadata"))
    }

    /// SIGKILL one node (no clean shutdown, as a crashed broker).
    pub fn kill(&mut self, id: i32) -> Result<()> {
        self.node_mut(id)?.kill()
    }

    /// Starts a stopped or killed node again on its log dir and ports; returns once it serves.
    pub fn restart(&mut self, id: i32) -> Result<()> {
        self.node_mut(id)?.restart()
    }

    /// Waits until `topic`-`partition` has a leader other than `old` (and not -1); returns it.
    pub fn wait_for_new_leader(&mut self, topic: &str, partition: i32, old: i32) -> Result<i32> {
        wait_for(
            &format!("a leader of {topic}-{partition} other than node {old}"),
            LEADER_MOVE_TIMEOUT,
            METADATA_POLL,
            || {
                let state = self.partition(topic, partition)?;
                Ok((state.leader >= 0 && state.leader != old).then_some(state.leader))
            },
        )
    }

    /// Waits until `node` is in the ISR of `topic`-`partition` again (a restarted node caught up).
    pub fn wait_in_sync(&mut self, topic: &str, partition: i32, node: i32) -> Result<()> {
        wait_for(
            &format!("node {node} back in the ISR of {topic}-{partition}"),
            LEADER_MOVE_TIMEOUT,
            METADATA_POLL,
            || Ok(self.partition(topic, partition)?.isr.contains(&node).then_some(())),
        )
    }

    /// Stops every broker cleanly, all at once (a SIGTERM each, each waited for in its own thread), then the
    /// controller, which answered their controlled shutdowns.
    pub fn stop_all(&mut self) -> Result<()> {
        std::thread::scope(|scope| {
            let stops: Vec<_> = self
                .nodes
                .iter_mut()
                .map(|node| scope.spawn(move || node.stop()))
                .collect();
            stops
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| bail_panic()))
                .collect::<Result<Vec<()>>>()
        })?;
        self.controller.stop().context("stopping the controller")
    }

    /// Starts the controller (a quorum of its own) and then every broker again, returning once each serves.
    pub fn restart_all(&mut self) -> Result<()> {
        if !self.controller.is_running() {
            self.controller.restart().context("restarting the controller")?;
        }
        std::thread::scope(|scope| {
            let starts: Vec<_> = self
                .nodes
                .iter_mut()
                .map(|node| scope.spawn(move || node.restart()))
                .collect();
            starts
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|_| bail_panic()))
                .collect::<Result<Vec<()>>>()
        })?;
        Ok(())
    }

    /// Fails unless every node runs.
    pub fn check_all_running(&mut self) -> Result<()> {
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if !node.is_running() {
                bail!("node {} is not running", i + 1);
            }
        }
        if !self.controller.is_running() {
            bail!("the controller (node {CONTROLLER_NODE_ID}) is not running");
        }
        Ok(())
    }
}

fn bail_panic() -> Result<()> {
    Err(anyhow::anyhow!("a node's stop or start panicked"))
}
