//! ListOffsets (earliest, latest, by time, max timestamp) and OffsetForLeaderEpoch, from the replica.
//!
//! "Latest" is the served high watermark (the last stable offset for a read_committed client, as a broker
//! answers): never an offset the replica might still take back.

use kafka_protocol::messages::list_offsets_response::{ListOffsetsPartitionResponse, ListOffsetsTopicResponse};
use kafka_protocol::messages::offset_for_leader_epoch_response::{EpochEndOffset, OffsetForLeaderTopicResult};
use kafka_protocol::messages::{
    ListOffsetsRequest, ListOffsetsResponse, OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
};

use super::Endpoint;
use crate::replica::{Isolation, ReadError, Replica};

/// ListOffsets' special timestamps.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const OFFSET_NOT_AVAILABLE: i16 = 78;

pub(super) async fn list(endpoint: &Endpoint, request: ListOffsetsRequest) -> ListOffsetsResponse {
    let replica = endpoint.replica.clone();
    let isolation = Isolation::from_wire(request.isolation_level);
    let topics = request.topics;
    let answered = tokio::task::spawn_blocking(move || {
        topics
            .into_iter()
            .map(|topic| {
                let mut out = ListOffsetsTopicResponse::default();
                out.partitions = topic
                    .partitions
                    .iter()
                    .map(|p| {
                        list_one(
                            replica.as_ref(),
                            &topic.name.0,
                            p.partition_index,
                            p.timestamp,
                            isolation,
                        )
                    })
                    .collect();
                out.name = topic.name;
                out
            })
            .collect::<Vec<_>>()
    })
    .await;
    let mut response = ListOffsetsResponse::default();
    response.topics = answered.unwrap_or_default();
    response
}

fn list_one(
    replica: &dyn Replica,
    topic: &str,
    partition: i32,
    timestamp: i64,
    isolation: Isolation,
) -> ListOffsetsPartitionResponse {
    let mut out = ListOffsetsPartitionResponse::default();
    out.partition_index = partition;
    out.timestamp = -1;
    out.offset = -1;
    out.leader_epoch = -1;
    let ends = match replica.ends(topic, partition) {
        Ok(ends) => ends,
        Err(e) => {
            out.error_code = code(&e);
            return out;
        }
    };
    let found = match timestamp {
        LATEST => Ok(Some((
            match isolation {
                Isolation::ReadUncommitted => ends.high_watermark,
                Isolation::ReadCommitted => ends.last_stable,
            },
            -1,
        ))),
        EARLIEST | EARLIEST_LOCAL => Ok(Some((ends.log_start, -1))),
        // Nothing of this replica is tiered: the latest tiered offset is "none", as a broker without tiered
        // storage answers.
        LATEST_TIERED => Ok(None),
        MAX_TIMESTAMP => replica.max_timestamp(topic, partition),
        t if t < 0 => {
            out.error_code = OFFSET_NOT_AVAILABLE;
            return out;
        }
        t => replica.offset_for_timestamp(topic, partition, t),
    };
    match found {
        Ok(Some((offset, ts))) => {
            out.offset = offset;
            out.timestamp = ts;
            if timestamp == LATEST {
                out.leader_epoch = ends.leader_epoch;
            }
        }
        Ok(None) => {}
        Err(e) => out.error_code = code(&e),
    }
    out
}

pub(super) async fn epochs(endpoint: &Endpoint, request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse {
    let replica = endpoint.replica.clone();
    let topics = request.topics;
    let answered = tokio::task::spawn_blocking(move || {
        topics
            .into_iter()
            .map(|topic| {
                let mut out = OffsetForLeaderTopicResult::default();
                out.partitions = topic
                    .partitions
                    .iter()
                    .map(|p| {
                        let mut e = EpochEndOffset::default();
                        e.partition = p.partition;
                        match replica.epoch_end(&topic.topic.0, p.partition, p.leader_epoch) {
                            Ok((epoch, end)) => {
                                e.leader_epoch = epoch;
                                e.end_offset = end;
                            }
                            Err(err) => {
                                e.error_code = code(&err);
                                e.leader_epoch = -1;
                                e.end_offset = -1;
                            }
                        }
                        e
                    })
                    .collect();
                out.topic = topic.topic;
                out
            })
            .collect::<Vec<_>>()
    })
    .await;
    let mut response = OffsetForLeaderEpochResponse::default();
    response.topics = answered.unwrap_or_default();
    response
}

/// The Kafka error code of a read error.
pub(super) fn code(e: &ReadError) -> i16 {
    match e {
        ReadError::UnknownPartition => UNKNOWN_TOPIC_OR_PARTITION,
        ReadError::OutOfRange { .. } => 1,
        ReadError::Storage(reason) => {
            tracing::warn!("answering a client with KAFKA_STORAGE_ERROR: {reason}");
            56
        }
    }
}
