//! The writes a client may try: refused with the error that makes it stop at once, naming the link.
//!
//! Why these codes: a producer retries retriable errors until its delivery timeout, which would look like a hang.
//! POLICY_VIOLATION on Produce is not retriable in the Java client nor in librdkafka, so the send fails at once, and
//! the Java client hands the application the broker's message ("topic T is a read-only mirror of link L"); the
//! authorization codes are as final, but the Java client replaces the message with its own ("Not authorized to
//! access topics"). An idempotent producer asks for a producer id first: it is given one (nothing is ever written
//! with it), so that its first send meets the same refusal and message rather than a bare "cluster authorization
//! failed". A transactional producer is refused at once (TRANSACTIONAL_ID_AUTHORIZATION_FAILED, final): a
//! transaction coordinator would have to write. Other writes (CreateTopics, DeleteRecords, AlterConfigs...) are not
//! in ApiVersions at all, so an admin client refuses them itself ("the broker does not support ...").

use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse};

use super::{text, Endpoint};

const POLICY_VIOLATION: i16 = 44;
const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
/// The producer id handed to an idempotent producer: never used for a write (every Produce is refused).
const NEVER_WRITTEN_PRODUCER_ID: i64 = 0;

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
                    r.error_code = POLICY_VIOLATION;
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
        "InitProducerId: an idempotent producer gets an id (its sends are refused), a transactional one is refused"
    );
    let mut response = InitProducerIdResponse::default();
    if request.transactional_id.as_ref().is_some_and(|id| !id.0.is_empty()) {
        response.error_code = TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
        response.producer_id = (-1).into();
        response.producer_epoch = -1;
    } else {
        response.producer_id = NEVER_WRITTEN_PRODUCER_ID.into();
        response.producer_epoch = 0;
    }
    response
}
