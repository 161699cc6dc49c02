//! The source broker connection ([`BrokerClient`]) that [`super::fetch_hw`] (`segmirror ship --source-bootstrap
//! HOST:PORT`: high watermarks learned as they move) and [`super::leadership`] share, and its `ListOffsets`
//! request, by which `fetch_hw` learns each partition first and which it polls when the broker speaks no usable
//! `Fetch`.
//!
//! Why: the default bound of a tail is the source partition's high watermark
//! ([`super::bound_hw`]). The broker's `replication-offset-checkpoint` gives it
//! only every `replica.high.watermark.checkpoint.interval.ms` (5 s by
//! default), so a tail bounded by the checkpoint lags the source by seconds.
//! A `ListOffsets` request for the latest offset with isolation level
//! `READ_UNCOMMITTED` answers with the leader's current high watermark
//! (Kafka's `Partition.fetchOffsetForTimestamp`: `LATEST_TIMESTAMP` under
//! `READ_UNCOMMITTED` is `localLog.highWatermark`), within a round trip. Asked
//! every [`LIST_OFFSETS_INTERVAL`], the bound lags by that interval at most.
//!
//! How: the requests and responses are encoded and decoded by the maintained
//! `kafka-protocol` crate and framed by `cluster_client::Connection` (shared
//! with the failover's admin client): `ApiVersions` once per
//! connection to choose the `ListOffsets` version both sides speak, then one
//! `ListOffsets` for every selected partition per interval. The asking runs
//! in `fetch_hw`'s background task, which keeps the answers, so the tail feed
//! never waits on the network.
//!
//! Failures never stop the shipper: an unreachable or misbehaving broker
//! (every read and write bounded by [`REQUEST_TIMEOUT`], every response by
//! [`MAX_RESPONSE_BYTES`]) is logged once per distinct error, the connection
//! dropped and dialled again with a doubling backoff up to
//! [`MAX_RECONNECT_BACKOFF`]; a partition answered with an error code keeps
//! its last known high watermark. A partition never answered has none:
//! [`Bound::Unknown`](super::bound_hw::Bound::Unknown), nothing of it ships.
//!
//! Limitations (one source broker per shipper): only the bootstrap broker
//! is asked, over a PLAINTEXT listener. A partition it does not lead answers
//! `NOT_LEADER_OR_FOLLOWER` and keeps its last known (or no) bound; routing by
//! `Metadata` to each partition's leader, and TLS/SASL listeners, are for the
//! multi-broker issue. The crate's decoder sizes arrays by their declared
//! count before reading them; a peer must echo this connection's correlation
//! id before a body is decoded, which a port speaking another protocol does
//! not, but a hostile peer posing as the broker could make it allocate.

use std::time::Duration;

use cluster_client::Connection;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    ApiKey, BrokerId, ListOffsetsRequest, ListOffsetsResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::{Error, Result};

/// The lowest `Fetch` version [`BrokerClient`] speaks (4: the lowest Kafka 4 speaks; it has the isolation level and
/// `max_bytes`).
pub const MIN_FETCH_VERSION: i16 = 4;

/// The highest `Fetch` version [`BrokerClient`] speaks (12): 13 and later name topics by id, which would need
/// `Metadata` first.
pub const MAX_FETCH_VERSION: i16 = 12;

/// How often the high watermarks are asked for (50 ms): one small request for
/// all partitions and microseconds of broker time, 20 a second; it bounds how
/// far behind the true high watermark the tail's bound may be, well under the
/// tail feed's own poll interval plus the direct path's 50 ms latency target.
pub const LIST_OFFSETS_INTERVAL: Duration = Duration::from_millis(50);

/// Longest wait for a connection, a request's write or a response (5 s): a
/// broker on a live link answers `ListOffsets` in milliseconds; longer means
/// the broker or the path is stuck, and the connection is dropped and dialled
/// again rather than waited on.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest response read (8 MiB, the shared connection's bound): a
/// `ListOffsets` answer costs tens of bytes per partition, so this fits
/// hundreds of thousands.
pub use cluster_client::connection::MAX_RESPONSE_BYTES;

/// Longest pause between attempts while the broker fails (5 s): reconnects
/// back off from [`LIST_OFFSETS_INTERVAL`], doubling, so a broker that is down
/// is not hammered, and one that comes back is asked again within seconds.
pub const MAX_RECONNECT_BACKOFF: Duration = Duration::from_secs(5);

/// The lowest `ListOffsets` version used: 2 adds the isolation level.
const MIN_LIST_OFFSETS_VERSION: i16 = 2;

/// The lowest `Metadata` version used: 7 adds each partition's leader epoch
/// ([`super::leadership`]).
const MIN_METADATA_VERSION: i16 = 7;

/// `ListOffsets` timestamp asking for the latest offset (Kafka's `ListOffsetsRequest.LATEST_TIMESTAMP`).
const LATEST_TIMESTAMP: i64 = -1;

/// Isolation level `READ_UNCOMMITTED`: the latest offset is the high watermark.
const READ_UNCOMMITTED: i8 = 0;

/// `ReplicaId` of a client that is not a broker (Kafka's `CONSUMER_REPLICA_ID`).
const CONSUMER_REPLICA_ID: i32 = -1;

/// The client id and software name the broker logs.
const CLIENT_ID: &str = "segmirror-shipper";

/// Timeouts and pacing of the asking (the named constants by default).
#[derive(Debug, Clone, Copy)]
pub struct ListOffsetsConfig {
    /// [`LIST_OFFSETS_INTERVAL`].
    pub interval: Duration,
    /// [`REQUEST_TIMEOUT`].
    pub request_timeout: Duration,
    /// [`MAX_RECONNECT_BACKOFF`].
    pub max_backoff: Duration,
}

impl Default for ListOffsetsConfig {
    fn default() -> Self {
        ListOffsetsConfig {
            interval: LIST_OFFSETS_INTERVAL,
            request_timeout: REQUEST_TIMEOUT,
            max_backoff: MAX_RECONNECT_BACKOFF,
        }
    }
}

/// One partition's answer to a `ListOffsets`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionAnswer {
    /// The high watermark.
    HighWatermark(i64),
    /// The broker's error code for this partition (e.g. 6, `NOT_LEADER_OR_FOLLOWER`).
    Error(i16),
    /// The response did not mention the partition.
    Missing,
}

/// A Kafka error code with its name, for messages people read.
pub use cluster_client::error_name;

/// One connection to a broker speaking the Kafka protocol.
pub struct BrokerClient {
    connection: Connection,
    list_offsets_version: i16,
    /// The `Metadata` version both sides speak, if any at or above [`MIN_METADATA_VERSION`].
    metadata_version: Option<i16>,
    /// The `Fetch` version of the long poll ([`super::fetch_hw`]), if the broker speaks one in its range.
    fetch_version: Option<i16>,
    timeout: Duration,
}

impl BrokerClient {
    /// Dial `broker` (HOST:PORT) and agree on the `ListOffsets` version.
    pub async fn connect(broker: &str, timeout: Duration) -> Result<Self> {
        let connection = Connection::connect(broker, CLIENT_ID, timeout)
            .await
            .map_err(source_broker_error)?;
        let list_offsets_version = connection
            .version::<ListOffsetsRequest>(ApiKey::ListOffsets, MIN_LIST_OFFSETS_VERSION)
            .map_err(source_broker_error)?;
        let metadata_version = connection
            .offered(ApiKey::Metadata)
            .map(|k| {
                k.max
                    .min(<MetadataRequest as kafka_protocol::protocol::Message>::VERSIONS.max)
            })
            .filter(|&v| v >= MIN_METADATA_VERSION);
        let fetch_version = connection.offered(ApiKey::Fetch).and_then(|offered| {
            let max = offered.max.min(MAX_FETCH_VERSION);
            (max >= offered.min.max(MIN_FETCH_VERSION)).then_some(max)
        });
        Ok(BrokerClient {
            connection,
            list_offsets_version,
            metadata_version,
            fetch_version,
            timeout,
        })
    }

    /// The address of the broker this connection reached.
    pub fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        self.connection.peer_addr()
    }

    /// The cluster's metadata as this broker knows it: every broker, and every topic's partitions with their
    /// leader and leader epoch ([`super::leadership`]).
    pub async fn metadata(&mut self) -> Result<MetadataResponse> {
        let version = self.metadata_version.ok_or_else(|| {
            self.error(format!(
                "the broker offers no Metadata version at or above {MIN_METADATA_VERSION} (the first with leader epochs)"
            ))
        })?;
        // All topics (null list), no topic created by asking.
        let request = MetadataRequest::default()
            .with_topics(None)
            .with_allow_auto_topic_creation(false);
        let response: MetadataResponse = self.call(ApiKey::Metadata, &request, version).await?;
        if response.error_code != 0 {
            return Err(self.error(format!("Metadata answered {}", error_name(response.error_code))));
        }
        Ok(response)
    }

    /// The `ListOffsets` version agreed on.
    pub fn list_offsets_version(&self) -> i16 {
        self.list_offsets_version
    }

    /// The `Fetch` version both sides speak in [`MIN_FETCH_VERSION`]`..=`[`MAX_FETCH_VERSION`] (topics named, not
    /// by id), for the long poll of [`super::fetch_hw`]; `None`: the broker speaks none of them.
    pub fn fetch_version(&self) -> Option<i16> {
        self.fetch_version
    }

    /// The high watermark of each of `partitions` (same order).
    pub async fn high_watermarks(&mut self, partitions: &[(String, i32)]) -> Result<Vec<PartitionAnswer>> {
        let mut topics: Vec<ListOffsetsTopic> = Vec::new();
        for (topic, partition) in partitions {
            let entry = ListOffsetsPartition::default()
                .with_partition_index(*partition)
                .with_timestamp(LATEST_TIMESTAMP);
            match topics.iter_mut().find(|t| t.name.0.as_str() == topic) {
                Some(t) => t.partitions.push(entry),
                None => topics.push(
                    ListOffsetsTopic::default()
                        .with_name(TopicName(StrBytes::from_string(topic.clone())))
                        .with_partitions(vec![entry]),
                ),
            }
        }
        let timeout_ms = i32::try_from(self.timeout.as_millis()).unwrap_or(i32::MAX);
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(CONSUMER_REPLICA_ID))
            .with_isolation_level(READ_UNCOMMITTED)
            .with_timeout_ms(timeout_ms)
            .with_topics(topics);
        let response: ListOffsetsResponse = self
            .call(ApiKey::ListOffsets, &request, self.list_offsets_version)
            .await?;
        Ok(partitions
            .iter()
            .map(|(topic, partition)| {
                let answer = response
                    .topics
                    .iter()
                    .filter(|t| t.name.0.as_str() == topic)
                    .flat_map(|t| t.partitions.iter())
                    .find(|p| p.partition_index == *partition);
                match answer {
                    None => PartitionAnswer::Missing,
                    Some(p) if p.error_code != 0 => PartitionAnswer::Error(p.error_code),
                    Some(p) if p.offset < 0 => PartitionAnswer::Error(-1),
                    Some(p) => PartitionAnswer::HighWatermark(p.offset),
                }
            })
            .collect())
    }

    pub(super) fn error(&self, reason: String) -> Error {
        source_broker_error(self.connection.error(reason))
    }

    /// Send one request and read its response over the shared connection (bounded in time and size).
    pub(super) async fn call<Q: Encodable, P: Decodable>(
        &mut self,
        key: ApiKey,
        request: &Q,
        version: i16,
    ) -> Result<P> {
        self.connection
            .call(key, request, version)
            .await
            .map_err(source_broker_error)
    }
}

/// One size-prefixed frame, at most [`MAX_RESPONSE_BYTES`] (the scripted brokers of the tests read requests with it).
#[cfg(test)]
pub(super) use cluster_client::connection::read_frame;

/// The shared connection's error as the shipper's.
fn source_broker_error(e: cluster_client::Error) -> Error {
    match e {
        cluster_client::Error::Broker { broker, reason } => Error::SourceBroker { broker, reason },
        e @ cluster_client::Error::Api { .. } => {
            let text = e.to_string();
            let broker = match &e {
                cluster_client::Error::Api { broker, .. } => broker.clone(),
                cluster_client::Error::Broker { broker, .. } => broker.clone(),
            };
            let reason = text
                .strip_prefix(&format!("broker {broker}: "))
                .unwrap_or(&text)
                .to_string();
            Error::SourceBroker { broker, reason }
        }
    }
}

#[cfg(test)]
#[path = "list_offsets_tests.rs"]
mod tests;
