//! Metadata: the replica's topics, each partition led by this endpoint, which is the whole cluster.
//!
//! Every partition names this node as leader and only replica, with the partition's newest leader epoch from
//! the mirror's `leader-epoch-checkpoint`, so clients that validate positions against epochs have the one they
//! need. Auto-creation is never done: an unknown topic is UNKNOWN_TOPIC_OR_PARTITION.

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::{text, Endpoint};
use crate::replica::TopicView;

pub(super) const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
/// The value meaning "authorized operations not asked for".
const OPERATIONS_NOT_ASKED: i32 = i32::MIN;

pub(super) fn answer(endpoint: &Endpoint, request: MetadataRequest, version: i16) -> MetadataResponse {
    let config = &endpoint.config;
    let node = BrokerId(config.node_id);
    let mut broker = MetadataResponseBroker::default();
    broker.node_id = node;
    broker.host = text(config.advertised_host.clone());
    broker.port = config.advertised_port;
    let topics = endpoint.replica.topics();
    let wanted: Vec<MetadataResponseTopic> = match request.topics {
        // v0: an empty list means all topics; v1+: null means all, empty means none.
        None => topics.iter().map(|t| topic(endpoint, t)).collect(),
        Some(list) if list.is_empty() && version == 0 => topics.iter().map(|t| topic(endpoint, t)).collect(),
        Some(list) => list
            .into_iter()
            .map(|asked| {
                let found = topics.iter().find(|t| match &asked.name {
                    Some(name) => t.name == name.0.as_str(),
                    None => !asked.topic_id.is_nil() && t.id == *asked.topic_id.as_bytes(),
                });
                match found {
                    Some(t) => topic(endpoint, t),
                    None => {
                        let mut missing = MetadataResponseTopic::default();
                        missing.error_code = UNKNOWN_TOPIC_OR_PARTITION;
                        missing.name = asked.name;
                        missing.topic_id = asked.topic_id;
                        missing.topic_authorized_operations = OPERATIONS_NOT_ASKED;
                        missing
                    }
                }
            })
            .collect(),
    };
    let mut response = MetadataResponse::default();
    response.brokers = vec![broker];
    response.cluster_id = Some(text(config.cluster_id.clone()));
    response.controller_id = node;
    response.topics = wanted;
    response.cluster_authorized_operations = OPERATIONS_NOT_ASKED;
    response
}

fn topic(endpoint: &Endpoint, view: &TopicView) -> MetadataResponseTopic {
    let node = BrokerId(endpoint.config.node_id);
    let mut t = MetadataResponseTopic::default();
    t.name = Some(TopicName(StrBytes::from_string(view.name.clone())));
    t.topic_id = uuid::Uuid::from_bytes(view.id);
    t.topic_authorized_operations = OPERATIONS_NOT_ASKED;
    t.partitions = view
        .partitions
        .iter()
        .map(|&index| {
            let mut p = MetadataResponsePartition::default();
            p.partition_index = index;
            p.leader_id = node;
            p.leader_epoch = endpoint
                .replica
                .ends(&view.name, index)
                .map_or(-1, |ends| ends.leader_epoch);
            p.replica_nodes = vec![node];
            p.isr_nodes = vec![node];
            p
        })
        .collect();
    t
}
