//! The admin calls a failover makes on the target cluster: topics (Metadata, CreateTopics, DescribeConfigs) and
//! consumer groups (FindCoordinator, DescribeGroups / ConsumerGroupDescribe, OffsetCommit, OffsetFetch).
//!
//! Why not Kafka's tools: a failover is one command that must check every answer (a commit refused for one
//! partition, a config the target changed) and report it; parsing `kafka-topics.sh` output would be guesswork and
//! needs a JVM.
//!
//! Offsets are committed as Kafka's admin client does (`alterConsumerGroupOffsets`): generation / member epoch -1,
//! no member id, and **no leader epoch** (`committedLeaderEpoch` -1): a source epoch on the target makes clients
//! loop or reset (docs/promotion.md). The coordinator accepts such a commit only while the group has no members.
//!
//! Group requests go to the group's coordinator (FindCoordinator, then a connection to that broker, kept); a
//! coordinator that is loading or moved (`COORDINATOR_LOAD_IN_PROGRESS`, `COORDINATOR_NOT_AVAILABLE`,
//! `NOT_COORDINATOR`), as right after a broker start, is asked again until the client's retry deadline.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::offset_commit_request::{OffsetCommitRequestPartition, OffsetCommitRequestTopic};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, CreateTopicsRequest, CreateTopicsResponse,
    DescribeConfigsRequest, DescribeConfigsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    FindCoordinatorRequest, FindCoordinatorResponse, GroupId, MetadataRequest, MetadataResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::connection::Connection;
use crate::error::{Error, Result};

/// The client id the target brokers log.
pub const CLIENT_ID: &str = "segmirror-admin";
/// Longest wait for a connection, a request's write or a response (30 s: CreateTopics waits for the controller).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long retriable coordinator errors are retried (60 s: a broker loading `__consumer_offsets` after a start).
pub const RETRY_DEADLINE: Duration = Duration::from_secs(60);

/// `ConfigResource.Type.TOPIC`.
const RESOURCE_TOPIC: i8 = 2;
/// `DescribeConfigs` config source of a topic-level override (`DYNAMIC_TOPIC_CONFIG`).
pub const SOURCE_TOPIC_CONFIG: i8 = 1;
/// FindCoordinator key type of a group.
const KEY_TYPE_GROUP: i8 = 0;
/// Error codes.
const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const GROUP_ID_NOT_FOUND: i16 = 69;

fn retriable(code: i16) -> bool {
    matches!(
        code,
        COORDINATOR_LOAD_IN_PROGRESS | COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR
    )
}

/// A topic as the target's metadata shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetTopic {
    pub partitions: i32,
    /// Replicas of partition 0 (the replication factor the target chose).
    pub replication_factor: usize,
}

/// One config of a topic as `DescribeConfigs` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetConfig {
    /// `None` for a sensitive config (never shown) or one without a value.
    pub value: Option<String>,
    /// `DescribeConfigs` config source: [`SOURCE_TOPIC_CONFIG`] for a topic-level override.
    pub source: i8,
}

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    /// `None`: the target's `default.replication.factor`.
    pub replication_factor: Option<i16>,
    pub configs: BTreeMap<String, String>,
}

/// Whether a group has members on the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupState {
    /// As the coordinator names it (`Empty`, `Stable`, `Dead`, ...; `Dead` for a group it does not know).
    pub state: String,
    pub members: usize,
    /// `classic` or `consumer` (KIP-848), as the describe answered.
    pub kind: &'static str,
}

impl GroupState {
    /// A simple commit (no member) is accepted only by a group without members: none listed, and a state that says
    /// so (`Empty`, or `Dead` for a group the coordinator does not know), whatever the describe omitted.
    pub fn accepts_simple_commit(&self) -> bool {
        self.members == 0 && matches!(self.state.as_str(), "Empty" | "Dead")
    }
}

/// One offset to commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetToCommit {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub metadata: String,
}

/// A committed offset as OffsetFetch returns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchedOffset {
    /// -1 when the group has none for the partition.
    pub offset: i64,
    /// -1 when none was committed.
    pub leader_epoch: i32,
}

/// An admin client of one cluster.
pub struct AdminClient {
    bootstrap: Connection,
    timeout: Duration,
    retry_deadline: Duration,
    /// Connections to group coordinators, by HOST:PORT.
    coordinators: HashMap<String, Connection>,
}

impl AdminClient {
    /// Connect to `bootstrap` (HOST:PORT of any broker of the cluster).
    pub async fn connect(bootstrap: &str, timeout: Duration) -> Result<AdminClient> {
        let connection = Connection::connect(bootstrap, CLIENT_ID, timeout).await?;
        Ok(AdminClient {
            bootstrap: connection,
            timeout,
            retry_deadline: RETRY_DEADLINE,
            coordinators: HashMap::new(),
        })
    }

    /// Change how long retriable coordinator errors are retried.
    pub fn with_retry_deadline(mut self, deadline: Duration) -> Self {
        self.retry_deadline = deadline;
        self
    }

    /// Every (non-internal) topic of the cluster with its partition count.
    pub async fn topics(&mut self) -> Result<BTreeMap<String, TargetTopic>> {
        let c = &mut self.bootstrap;
        let version = c.version::<MetadataRequest>(ApiKey::Metadata, 4)?;
        let request = MetadataRequest::default()
            .with_topics(None)
            .with_allow_auto_topic_creation(false);
        let response: MetadataResponse = c.call(ApiKey::Metadata, &request, version).await?;
        let mut topics = BTreeMap::new();
        for t in response.topics {
            let Some(name) = t.name else { continue };
            if t.is_internal || t.error_code != 0 {
                continue;
            }
            let replication_factor = t
                .partitions
                .iter()
                .find(|p| p.partition_index == 0)
                .map_or(0, |p| p.replica_nodes.len());
            topics.insert(
                name.0.to_string(),
                TargetTopic {
                    partitions: i32::try_from(t.partitions.len()).unwrap_or(i32::MAX),
                    replication_factor,
                },
            );
        }
        Ok(topics)
    }

    /// Create `topics`; per topic, `Ok` or the broker's refusal (e.g. `TopicAlreadyExists`, `InvalidConfig`).
    pub async fn create_topics(&mut self, topics: &[NewTopic]) -> Result<Vec<(String, Result<()>)>> {
        let c = &mut self.bootstrap;
        // v4: replication factor -1 (the broker's default).
        let version = c.version::<CreateTopicsRequest>(ApiKey::CreateTopics, 4)?;
        let creatable = topics
            .iter()
            .map(|t| {
                CreatableTopic::default()
                    .with_name(TopicName(StrBytes::from_string(t.name.clone())))
                    .with_num_partitions(t.partitions)
                    .with_replication_factor(t.replication_factor.unwrap_or(-1))
                    .with_configs(
                        t.configs
                            .iter()
                            .map(|(k, v)| {
                                CreatableTopicConfig::default()
                                    .with_name(StrBytes::from_string(k.clone()))
                                    .with_value(Some(StrBytes::from_string(v.clone())))
                            })
                            .collect(),
                    )
            })
            .collect();
        let timeout_ms = i32::try_from(self.timeout.as_millis()).unwrap_or(i32::MAX);
        let request = CreateTopicsRequest::default()
            .with_topics(creatable)
            .with_timeout_ms(timeout_ms)
            .with_validate_only(false);
        let response: CreateTopicsResponse = c.call(ApiKey::CreateTopics, &request, version).await?;
        let broker = c.broker().to_string();
        Ok(topics
            .iter()
            .map(|t| {
                let answer = response.topics.iter().find(|r| r.name.0.as_str() == t.name);
                let result = match answer {
                    None => Err(Error::Broker {
                        broker: broker.clone(),
                        reason: format!("the CreateTopics response does not mention topic {}", t.name),
                    }),
                    Some(r) if r.error_code != 0 => Err(Error::Api {
                        broker: broker.clone(),
                        api: "CreateTopics",
                        resource: format!("topic {}", t.name),
                        code: r.error_code,
                        message: r.error_message.as_ref().map(|m| m.to_string()),
                    }),
                    Some(_) => Ok(()),
                };
                (t.name.clone(), result)
            })
            .collect())
    }

    /// Every config of each of `topics` (value and source); per topic, the configs or the broker's refusal.
    pub async fn describe_topic_configs(
        &mut self,
        topics: &[String],
    ) -> Result<BTreeMap<String, Result<BTreeMap<String, TargetConfig>>>> {
        let c = &mut self.bootstrap;
        let version = c.version::<DescribeConfigsRequest>(ApiKey::DescribeConfigs, 1)?;
        let request = DescribeConfigsRequest::default()
            .with_resources(
                topics
                    .iter()
                    .map(|t| {
                        DescribeConfigsResource::default()
                            .with_resource_type(RESOURCE_TOPIC)
                            .with_resource_name(StrBytes::from_string(t.clone()))
                            .with_configuration_keys(None)
                    })
                    .collect(),
            )
            .with_include_synonyms(false)
            .with_include_documentation(false);
        let response: DescribeConfigsResponse = c.call(ApiKey::DescribeConfigs, &request, version).await?;
        let broker = c.broker().to_string();
        let mut out = BTreeMap::new();
        for t in topics {
            let result = match response.results.iter().find(|r| r.resource_name.as_str() == t) {
                None => Err(Error::Broker {
                    broker: broker.clone(),
                    reason: format!("the DescribeConfigs response does not mention topic {t}"),
                }),
                Some(r) if r.error_code != 0 => Err(Error::Api {
                    broker: broker.clone(),
                    api: "DescribeConfigs",
                    resource: format!("topic {t}"),
                    code: r.error_code,
                    message: r.error_message.as_ref().map(|m| m.to_string()),
                }),
                Some(r) => Ok(r
                    .configs
                    .iter()
                    .map(|e| {
                        (
                            e.name.to_string(),
                            TargetConfig {
                                value: e.value.as_ref().map(|v| v.to_string()),
                                source: e.config_source,
                            },
                        )
                    })
                    .collect()),
            };
            out.insert(t.clone(), result);
        }
        Ok(out)
    }

    /// The connection to `group`'s coordinator (found, dialled and kept).
    async fn coordinator(&mut self, group: &str) -> Result<&mut Connection> {
        let started = Instant::now();
        let address = loop {
            let c = &mut self.bootstrap;
            // Single-key versions 1-3 (4+ batch keys); 1 adds the key type.
            let version = c.version::<FindCoordinatorRequest>(ApiKey::FindCoordinator, 1)?.min(3);
            let request = FindCoordinatorRequest::default()
                .with_key(StrBytes::from_string(group.to_string()))
                .with_key_type(KEY_TYPE_GROUP);
            let response: FindCoordinatorResponse = c.call(ApiKey::FindCoordinator, &request, version).await?;
            if response.error_code == 0 {
                break format!("{}:{}", response.host.as_str(), response.port);
            }
            let error = Error::Api {
                broker: c.broker().to_string(),
                api: "FindCoordinator",
                resource: format!("group {group}"),
                code: response.error_code,
                message: response.error_message.as_ref().map(|m| m.to_string()),
            };
            self.wait_or_fail(started, error).await?;
        };
        if !self.coordinators.contains_key(&address) {
            let connection = Connection::connect(&address, CLIENT_ID, self.timeout).await?;
            self.coordinators.insert(address.clone(), connection);
        }
        self.coordinators.get_mut(&address).ok_or_else(|| Error::Broker {
            broker: address.clone(),
            reason: "coordinator connection lost".into(),
        })
    }

    /// Sleep and go on while a retriable error is within the deadline; fail otherwise.
    async fn wait_or_fail(&mut self, started: Instant, error: Error) -> Result<()> {
        match error.code() {
            Some(code) if retriable(code) && started.elapsed() < self.retry_deadline => {
                tracing::debug!(%error, "retrying");
                if code == NOT_COORDINATOR {
                    self.coordinators.clear();
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok(())
            }
            _ => Err(error),
        }
    }

    /// Whether `group` has members on the cluster: `DescribeGroups`, and for a KIP-848 group (which the classic
    /// describe does not show) `ConsumerGroupDescribe`.
    pub async fn group_state(&mut self, group: &str) -> Result<GroupState> {
        let started = Instant::now();
        loop {
            let c = self.coordinator(group).await?;
            let version = c.version::<DescribeGroupsRequest>(ApiKey::DescribeGroups, 0)?;
            let request =
                DescribeGroupsRequest::default().with_groups(vec![GroupId(StrBytes::from_string(group.to_string()))]);
            let response: DescribeGroupsResponse = c.call(ApiKey::DescribeGroups, &request, version).await?;
            let broker = c.broker().to_string();
            let described = response
                .groups
                .into_iter()
                .find(|g| g.group_id.0.as_str() == group)
                .ok_or_else(|| Error::Broker {
                    broker: broker.clone(),
                    reason: format!("the DescribeGroups response does not mention group {group}"),
                })?;
            match described.error_code {
                0 if described.protocol_type.as_str() == "consumer"
                    && described.members.is_empty()
                    && described.group_state.as_str() != "Empty"
                    && described.group_state.as_str() != "Dead" =>
                {
                    // A KIP-848 group shown by the classic describe without its members: ask the new API.
                    return self.consumer_group_state(group).await;
                }
                0 => {
                    return Ok(GroupState {
                        state: described.group_state.to_string(),
                        members: described.members.len(),
                        kind: "classic",
                    })
                }
                GROUP_ID_NOT_FOUND => return self.consumer_group_state(group).await,
                code => {
                    let error = Error::Api {
                        broker,
                        api: "DescribeGroups",
                        resource: format!("group {group}"),
                        code,
                        message: described.error_message.as_ref().map(|m| m.to_string()),
                    };
                    self.wait_or_fail(started, error).await?;
                }
            }
        }
    }

    async fn consumer_group_state(&mut self, group: &str) -> Result<GroupState> {
        let started = Instant::now();
        loop {
            let c = self.coordinator(group).await?;
            let version = c.version::<ConsumerGroupDescribeRequest>(ApiKey::ConsumerGroupDescribe, 0)?;
            let request = ConsumerGroupDescribeRequest::default()
                .with_group_ids(vec![GroupId(StrBytes::from_string(group.to_string()))]);
            let response: ConsumerGroupDescribeResponse =
                c.call(ApiKey::ConsumerGroupDescribe, &request, version).await?;
            let broker = c.broker().to_string();
            let described = response
                .groups
                .into_iter()
                .find(|g| g.group_id.0.as_str() == group)
                .ok_or_else(|| Error::Broker {
                    broker: broker.clone(),
                    reason: format!("the ConsumerGroupDescribe response does not mention group {group}"),
                })?;
            match described.error_code {
                0 => {
                    return Ok(GroupState {
                        state: described.group_state.to_string(),
                        members: described.members.len(),
                        kind: "consumer",
                    })
                }
                GROUP_ID_NOT_FOUND => {
                    return Ok(GroupState {
                        state: "Dead".into(),
                        members: 0,
                        kind: "consumer",
                    })
                }
                code => {
                    let error = Error::Api {
                        broker,
                        api: "ConsumerGroupDescribe",
                        resource: format!("group {group}"),
                        code,
                        message: described.error_message.as_ref().map(|m| m.to_string()),
                    };
                    self.wait_or_fail(started, error).await?;
                }
            }
        }
    }

    /// Commit `offsets` for `group` as a simple (memberless) commit without leader epochs; per partition, the
    /// broker's error code (0 = committed).
    pub async fn commit_offsets(
        &mut self,
        group: &str,
        offsets: &[OffsetToCommit],
    ) -> Result<Vec<((String, i32), i16)>> {
        let mut topics: Vec<OffsetCommitRequestTopic> = Vec::new();
        for o in offsets {
            let entry = OffsetCommitRequestPartition::default()
                .with_partition_index(o.partition)
                .with_committed_offset(o.offset)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(StrBytes::from_string(o.metadata.clone())));
            match topics.iter_mut().find(|t| t.name.0.as_str() == o.topic) {
                Some(t) => t.partitions.push(entry),
                None => topics.push(
                    OffsetCommitRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(o.topic.clone())))
                        .with_partitions(vec![entry]),
                ),
            }
        }
        let started = Instant::now();
        loop {
            let c = self.coordinator(group).await?;
            // v2-9 name topics by name (v10 by id); v6 adds the leader epoch, sent as -1.
            let version = c.version::<OffsetCommitRequest>(ApiKey::OffsetCommit, 2)?;
            let request = OffsetCommitRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
                .with_generation_id_or_member_epoch(-1)
                .with_member_id(StrBytes::from_static_str(""))
                .with_group_instance_id(None)
                .with_retention_time_ms(-1)
                .with_topics(topics.clone());
            let response: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, &request, version).await?;
            let broker = c.broker().to_string();
            let answers: Vec<((String, i32), i16)> = offsets
                .iter()
                .map(|o| {
                    let code = response
                        .topics
                        .iter()
                        .filter(|t| t.name.0.as_str() == o.topic)
                        .flat_map(|t| t.partitions.iter())
                        .find(|p| p.partition_index == o.partition)
                        .map_or(-1, |p| p.error_code);
                    ((o.topic.clone(), o.partition), code)
                })
                .collect();
            match answers.iter().find(|(_, code)| retriable(*code)) {
                Some(((topic, partition), code)) => {
                    let error = Error::Api {
                        broker,
                        api: "OffsetCommit",
                        resource: format!("group {group} {topic}-{partition}"),
                        code: *code,
                        message: None,
                    };
                    self.wait_or_fail(started, error).await?;
                }
                None => return Ok(answers),
            }
        }
    }

    /// The committed offsets of `group` for `partitions` (stable: waits out pending transactional commits).
    pub async fn fetch_offsets(
        &mut self,
        group: &str,
        partitions: &[(String, i32)],
    ) -> Result<BTreeMap<(String, i32), FetchedOffset>> {
        let mut topics: Vec<OffsetFetchRequestTopic> = Vec::new();
        for (topic, partition) in partitions {
            match topics.iter_mut().find(|t| t.name.0.as_str() == topic) {
                Some(t) => t.partition_indexes.push(*partition),
                None => topics.push(
                    OffsetFetchRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(topic.clone())))
                        .with_partition_indexes(vec![*partition]),
                ),
            }
        }
        let started = Instant::now();
        loop {
            let c = self.coordinator(group).await?;
            // v1-7: one group per request, topics by name; 5 adds the leader epoch.
            let version = c.version::<OffsetFetchRequest>(ApiKey::OffsetFetch, 1)?.min(7);
            let mut request = OffsetFetchRequest::default()
                .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
                .with_topics(Some(topics.clone()));
            if version >= 7 {
                request = request.with_require_stable(true);
            }
            let response: OffsetFetchResponse = c.call(ApiKey::OffsetFetch, &request, version).await?;
            let broker = c.broker().to_string();
            if response.error_code != 0 {
                let error = Error::Api {
                    broker,
                    api: "OffsetFetch",
                    resource: format!("group {group}"),
                    code: response.error_code,
                    message: None,
                };
                self.wait_or_fail(started, error).await?;
                continue;
            }
            let mut out = BTreeMap::new();
            for t in &response.topics {
                for p in &t.partitions {
                    if p.error_code != 0 {
                        return Err(Error::Api {
                            broker,
                            api: "OffsetFetch",
                            resource: format!("group {group} {}-{}", t.name.0.as_str(), p.partition_index),
                            code: p.error_code,
                            message: None,
                        });
                    }
                    out.insert(
                        (t.name.0.to_string(), p.partition_index),
                        FetchedOffset {
                            offset: p.committed_offset,
                            leader_epoch: p.committed_leader_epoch,
                        },
                    );
                }
            }
            return Ok(out);
        }
    }
}

#[cfg(test)]
#[path = "admin_tests.rs"]
mod tests;
