//! The writes a client may try: refused with the error that makes it stop at once, naming the link.
//!
//! Why these codes: a producer retries retriable errors until its delivery timeout, which would look like a hang.
//! TOPIC_AUTHORIZATION_FAILED on Produce and CLUSTER_AUTHORIZATION_FAILED / TRANSACTIONAL_ID_AUTHORIZATION_FAILED
//! on InitProducerId are fatal in the Java client and in librdkafka: the send fails at once, and Produce v8+
//! carries our message ("a read-only mirror of link L") to the application. Other writes (CreateTopics,
//! DeleteRecords, AlterConfigs...) are not in ApiVersions at all, so an admin client refuses them itself
//! ("the broker does not support ...") without sending anything.

use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse};

use super::{text, Endpoint};

const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;

/// What the client is told.
pub(super) fn read_only(endpoint: &Endpoint, topic: &str) -> String {
    format!(
        "topic {topic} is a read-only mirror of link {} (segmirror serve): write to the source cluster, or to the \
         target cluster after failover",
        endpoint.replica.link()
    )
}

pub(super) fn produce(endpoint: &Endpoint, request: ProduceRequest) -> ProduceResponse {
    tracing::info!("refusing a Produce request: the endpoint is read-only");
    let mut response = ProduceResponse::default();
    response.responses = request
        .topic_data
        .into_iter()
        .map(|topic| {
            let message = read_only(endpoint, topic.name.0.as_str());
            let mut out = TopicProduceResponse::default();
            out.partition_responses = topic
                .partition_data
                .iter()
                .map(|p| {
                    let mut r = PartitionProduceResponse::default();
                    r.index = p.index;
                    r.error_code = TOPIC_AUTHORIZATION_FAILED;
                    r.base_offset = -1;
                    r.log_append_time_ms = -1;
                    r.log_start_offset = -1;
                    r.error_message = Some(text(message.clone()));
                    r
                })
                .collect();
            out.name = topic.name;
            out.topic_id = topic.topic_id;
            out
        })
        .collect();
    response
}

pub(super) fn init_producer_id(endpoint: &Endpoint, request: InitProducerIdRequest) -> InitProducerIdResponse {
    tracing::info!(
        link = endpoint.replica.link(),
        "refusing InitProducerId: the endpoint is read-only"
    );
    let mut response = InitProducerIdResponse::default();
    response.error_code = if request.transactional_id.as_ref().is_some_and(|id| !id.0.is_empty()) {
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    } else {
        CLUSTER_AUTHORIZATION_FAILED
    };
    response.producer_id = (-1).into();
    response.producer_epoch = -1;
    response
}
