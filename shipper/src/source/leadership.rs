//! Which partitions this broker leads, asked of the broker itself over the Kafka protocol (`Metadata`).
//!
//! Why: with a source cluster of several brokers one shipper runs beside each broker and reads that broker's
//! log dir; each partition has a replica on several of them, and exactly one shipper may ship it at a time. The
//! natural one is the shipper beside the partition's leader: the leader's replica is the one the high watermark is
//! computed on, and it is the one that keeps growing. So a shipper ships only the partitions its broker leads, at
//! the leader epoch the cluster's metadata gives, and claims each from the applier with that epoch (the applier's
//! fencing by epoch is the guarantee that only one appends; following leadership here is the courtesy that keeps
//! two shippers from fighting over a partition).
//!
//! How: [`MetadataLeadership::spawn`] asks the local broker (`--source-bootstrap`) for the metadata of all topics
//! every [`LEADERSHIP_INTERVAL`] on a background task; [`LeadershipSource::led_epoch`] only reads the last answer.
//! This broker's node id comes from its log dir's `meta.properties` ([`node_id_of_log_dir`]); the broker answering
//! the bootstrap address must be that node (found among the answer's brokers by its advertised address, which must
//! resolve to the address dialled), otherwise every answer is refused, naming both ids: a shipper beside broker 1
//! that asks broker 2 is a misconfiguration, and its `ListOffsets` high watermarks would be another broker's.
//!
//! Failures never invent leadership: an unreachable broker keeps the last answer for at most
//! [`MAX_LEADERSHIP_AGE`], after which nothing is led until an answer comes; a partition whose leadership moved
//! away is not led from the answer that says so on. A partition answered with an error code is not led.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use kafka_protocol::messages::MetadataResponse;

use super::list_offsets::{BrokerClient, ListOffsetsConfig};
use crate::{Error, Result};

/// How often the metadata is asked for (150 ms): leadership moves only after a broker's session times out
/// (Kafka's default 9 s) or an election, so this is far finer than the events it follows, and it bounds how long
/// a shipper keeps shipping a partition whose leadership moved away (the applier fences it anyway) and how soon
/// the new leader's shipper claims it. One request and an answer of tens of bytes per partition.
pub const LEADERSHIP_INTERVAL: Duration = Duration::from_millis(150);

/// How long the last answer stays in force while the broker does not answer (3 s): long enough to ride over a
/// dropped connection or a slow answer, short enough that a shipper whose broker is gone stops treating its
/// partitions as led well before the cluster fences that broker (Kafka's `broker.session.timeout.ms`, 9 s) and
/// another leader's shipper claims them.
pub const MAX_LEADERSHIP_AGE: Duration = Duration::from_secs(3);

/// The file of a log dir holding the broker's `node.id` (KRaft's `meta.properties`).
pub const META_PROPERTIES: &str = "meta.properties";

/// A broker's `node.id` from its log dir's `meta.properties`. Blocking.
pub fn node_id_of_log_dir(log_dir: &Path) -> Result<i32> {
    let path = log_dir.join(META_PROPERTIES);
    let text = std::fs::read_to_string(&path).map_err(|e| Error::io(&path, e))?;
    let value = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#') && !l.starts_with('!'))
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == "node.id")
        .map(|(_, v)| v.trim().to_string());
    let invalid = |reason: String| Error::InvalidSetting {
        setting: "source log dir",
        reason: format!("{}: {reason}", path.display()),
    };
    let value = value.ok_or_else(|| invalid("no node.id (not a KRaft broker's log dir?)".to_string()))?;
    value
        .parse::<i32>()
        .ok()
        .filter(|id| *id >= 0)
        .ok_or_else(|| invalid(format!("node.id {value:?} is not a node id")))
}

/// Where leadership comes from (the seam the tail feed reads; tests give it a fixed view).
pub trait LeadershipSource: Send + Sync {
    /// This broker's node id.
    fn node_id(&self) -> i32;

    /// The leader epoch at which this broker leads `topic`-`partition`, by the latest answer in force; `None`:
    /// another broker leads it, none does, or it is not known.
    fn led_epoch(&self, topic: &str, partition: i32) -> Option<i32>;

    /// A counter that moves whenever what [`led_epoch`](Self::led_epoch) answers moves, so that the feed wakes
    /// at once. Default: `None` (the feed polls).
    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        None
    }
}

/// The partitions `node_id` leads in a `Metadata` answer, with their leader epochs. Topics and partitions answered
/// with an error code are left out (not led, as far as this answer tells).
pub fn led_partitions(answer: &MetadataResponse, node_id: i32) -> HashMap<(String, i32), i32> {
    let mut led = HashMap::new();
    for topic in answer.topics.iter().filter(|t| t.error_code == 0) {
        let Some(name) = &topic.name else { continue };
        for p in topic
            .partitions
            .iter()
            .filter(|p| p.error_code == 0 && p.leader_id.0 == node_id && p.leader_epoch >= 0)
        {
            led.insert((name.0.to_string(), p.partition_index), p.leader_epoch);
        }
    }
    led
}

/// The node id of the broker that answered, found by its advertised address: the one broker of the answer whose
/// `host:port` resolves to `peer`. `resolve` maps a `host:port` to its addresses. Errors: no broker or several
/// match.
pub fn answering_node(
    answer: &MetadataResponse,
    peer: SocketAddr,
    mut resolve: impl FnMut(&str) -> Vec<SocketAddr>,
) -> std::result::Result<i32, String> {
    let mut matches = Vec::new();
    let mut advertised = Vec::new();
    for b in &answer.brokers {
        let addr = format!("{}:{}", b.host, b.port);
        if resolve(&addr).contains(&peer) {
            matches.push(b.node_id.0);
        }
        advertised.push(format!("node {} at {addr}", b.node_id.0));
    }
    match matches.as_slice() {
        [one] => Ok(*one),
        [] => Err(format!(
            "cannot tell which node answered at {peer}: no advertised listener resolves to it ({}); give \
             --source-bootstrap the advertised address of the broker beside this shipper",
            advertised.join(", ")
        )),
        several => Err(format!(
            "several nodes ({several:?}) advertise {peer}: cannot tell which one this shipper sits beside"
        )),
    }
}

/// What the asking task shares with readers.
#[derive(Debug, Default)]
struct Known {
    led: HashMap<(String, i32), i32>,
    /// When the view in `led` was answered (`None`: never).
    as_of: Option<Instant>,
    last_error: Option<String>,
    answers: u64,
}

/// Leadership asked of the source broker (see the module doc). Dropping it stops the asking.
pub struct MetadataLeadership {
    node_id: i32,
    known: Arc<RwLock<Known>>,
    max_age: Duration,
    changed: tokio::sync::watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl MetadataLeadership {
    /// Start asking `bootstrap` (HOST:PORT), which must be node `node_id`, on `runtime`, every `interval`;
    /// `config` gives the request timeout and the reconnect backoff.
    pub fn spawn(
        runtime: &tokio::runtime::Handle,
        bootstrap: String,
        node_id: i32,
        interval: Duration,
        config: ListOffsetsConfig,
    ) -> Self {
        let known = Arc::new(RwLock::new(Known::default()));
        let (changes, changed) = tokio::sync::watch::channel(0u64);
        let task = runtime.spawn(ask(bootstrap, node_id, interval, config, known.clone(), changes));
        MetadataLeadership {
            node_id,
            known,
            max_age: MAX_LEADERSHIP_AGE,
            changed,
            task,
        }
    }

    /// Keep the last answer in force for `age` without a new one (default [`MAX_LEADERSHIP_AGE`]).
    pub fn with_max_age(mut self, age: Duration) -> Self {
        self.max_age = age;
        self
    }

    /// Why the last attempt failed, while no answer has come since.
    pub fn last_error(&self) -> Option<String> {
        self.known.read().unwrap_or_else(|p| p.into_inner()).last_error.clone()
    }

    /// How many answers were taken so far.
    pub fn answers(&self) -> u64 {
        self.known.read().unwrap_or_else(|p| p.into_inner()).answers
    }
}

impl Drop for MetadataLeadership {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl LeadershipSource for MetadataLeadership {
    fn node_id(&self) -> i32 {
        self.node_id
    }

    fn led_epoch(&self, topic: &str, partition: i32) -> Option<i32> {
        let known = self.known.read().unwrap_or_else(|p| p.into_inner());
        if known.as_of.is_none_or(|at| at.elapsed() > self.max_age) {
            return None;
        }
        known.led.get(&(topic.to_string(), partition)).copied()
    }

    fn changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        Some(self.changed.clone())
    }
}

/// Resolve `host:port` (blocking-free for IP literals; names through the runtime's resolver).
async fn resolve(addr: &str) -> Vec<SocketAddr> {
    match tokio::net::lookup_host(addr).await {
        Ok(addrs) => addrs.collect(),
        Err(_) => Vec::new(),
    }
}

/// One answer from a connection whose node is known to be ours.
async fn answer_from(
    client: &mut BrokerClient,
    bootstrap: &str,
    node_id: i32,
    identified: &mut bool,
) -> Result<MetadataResponse> {
    let answer = client.metadata().await?;
    if !*identified {
        let peer = client.peer_addr().ok_or_else(|| Error::SourceBroker {
            broker: bootstrap.to_string(),
            reason: "the connection has no peer address".to_string(),
        })?;
        let mut resolved = HashMap::new();
        for b in &answer.brokers {
            let addr = format!("{}:{}", b.host, b.port);
            let addrs = resolve(&addr).await;
            resolved.insert(addr, addrs);
        }
        let answering =
            answering_node(&answer, peer, |a| resolved.get(a).cloned().unwrap_or_default()).map_err(|reason| {
                Error::SourceBroker {
                    broker: bootstrap.to_string(),
                    reason,
                }
            })?;
        if answering != node_id {
            return Err(Error::SourceBroker {
                broker: bootstrap.to_string(),
                reason: format!(
                    "is node {answering}, but the log dir this shipper reads belongs to node {node_id} \
                     (its meta.properties): --source-bootstrap must be the broker beside the shipper"
                ),
            });
        }
        *identified = true;
    }
    Ok(answer)
}

/// What [`check_node`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeCheck {
    /// The broker answered and is the node the log dir belongs to.
    Confirmed,
    /// No connection to the broker (it is down or restarting): nothing is known yet. The leadership source keeps
    /// asking and, until an answer, leads nothing (nothing is shipped); the identity is checked on its first answer.
    Unreachable { reason: String },
}

/// Asks `bootstrap` once which node it is: an error unless it is `node_id` (the check `segmirror ship` makes
/// before starting, so a misconfigured shipper refuses at once). A broker that cannot be reached is
/// [`NodeCheck::Unreachable`], not an error: a shipper restarted beside a broker that is still down waits for it
/// rather than exiting (a service manager would restart it in a loop).
pub async fn check_node(bootstrap: &str, node_id: i32, timeout: Duration) -> Result<NodeCheck> {
    let mut client = match BrokerClient::connect(bootstrap, timeout).await {
        Ok(client) => client,
        Err(e) => return Ok(NodeCheck::Unreachable { reason: e.to_string() }),
    };
    let mut identified = false;
    answer_from(&mut client, bootstrap, node_id, &mut identified)
        .await
        .map(|_| NodeCheck::Confirmed)
}

/// The asking loop: runs until the source is dropped.
async fn ask(
    bootstrap: String,
    node_id: i32,
    interval: Duration,
    config: ListOffsetsConfig,
    known: Arc<RwLock<Known>>,
    changes: tokio::sync::watch::Sender<u64>,
) {
    let mut client: Option<BrokerClient> = None;
    let mut identified = false;
    let mut backoff = interval;
    loop {
        if client.is_none() {
            identified = false;
            match BrokerClient::connect(&bootstrap, config.request_timeout).await {
                Ok(c) => client = Some(c),
                Err(e) => {
                    note_error(&known, &bootstrap, e.to_string(), backoff);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(config.max_backoff);
                    continue;
                }
            }
        }
        let Some(c) = client.as_mut() else { continue };
        match answer_from(c, &bootstrap, node_id, &mut identified).await {
            Ok(answer) => {
                let led = led_partitions(&answer, node_id);
                let moved = {
                    let mut k = known.write().unwrap_or_else(|p| p.into_inner());
                    if k.last_error.take().is_some() {
                        tracing::info!(broker = %bootstrap, "the source broker answers Metadata again");
                    }
                    let moved = k.led != led || k.as_of.is_none();
                    if k.led != led {
                        tracing::info!(node = node_id, led = led.len(), "partitions led by this broker changed");
                    }
                    k.led = led;
                    k.as_of = Some(Instant::now());
                    k.answers += 1;
                    moved
                };
                if moved {
                    changes.send_modify(|n| *n = n.wrapping_add(1));
                }
                backoff = interval;
                tokio::time::sleep(interval).await;
            }
            Err(e) => {
                client = None;
                note_error(&known, &bootstrap, e.to_string(), backoff);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(config.max_backoff);
            }
        }
    }
}

fn note_error(known: &RwLock<Known>, bootstrap: &str, message: String, retry_in: Duration) {
    let mut k = known.write().unwrap_or_else(|p| p.into_inner());
    if k.last_error.as_deref() != Some(message.as_str()) {
        tracing::warn!(broker = %bootstrap, error = %message, ?retry_in, "asking the source broker for leadership failed: the last answer stays in force for at most MAX_LEADERSHIP_AGE");
    }
    k.last_error = Some(message);
}

#[cfg(test)]
#[path = "leadership_tests.rs"]
mod tests;
