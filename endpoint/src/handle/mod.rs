//! One module per API: a decoded request in, its response out.
//!
//! Why the table in [`SERVED`]: ApiVersions tells a client exactly what it may send, and nothing else is decoded.
//! A request of an api key or version outside it ends the connection, as a broker does with a request it cannot
//! parse; a client only sends one if it ignored ApiVersions. Writes are in the table only so that a producer
//! pointed here is told, in the error it stops on, that these topics are a read-only mirror (`refuse`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseKind};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use kafka_protocol::protocol::Encodable;

use crate::config::{Limits, ServeConfig};
use crate::group::Coordinator;
use crate::replica::Replica;
use zero_copy::Spliced;

mod configs;
mod fetch;
mod groups;
mod metadata;
mod offsets;
mod refuse;
mod sessions;
mod versions;
mod zero_copy;

pub use zero_copy::Piece;

pub use sessions::FetchSessionLimits;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod zero_copy_tests;

/// The APIs served and the versions of each: what ApiVersions answers.
///
/// Versions are those the `kafka-protocol` crate encodes, capped where a newer version changes what the answer
/// means: OffsetCommit and OffsetFetch stop at 9 (10 names topics by id only), Produce at 11 (12 adds nothing a
/// refusal needs and 13 names topics by id).
pub const SERVED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 11),
    (ApiKey::Fetch, 4, 17),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::DeleteGroups, 0, 2),
];

/// What the connection does with a request.
pub enum Outcome {
    /// Send this response body; the permit (a fetch's record memory) is released once it is written.
    Respond(BytesMut, Option<OwnedSemaphorePermit>),
    /// Send these pieces: bytes encoded here, and records straight from segment files (`zero_copy`).
    RespondSpliced(Vec<Piece>, Option<OwnedSemaphorePermit>),
    /// An api key or version not served: end the connection.
    Unsupported,
    /// The body does not decode: end the connection.
    Malformed(String),
}

/// The endpoint's shared state: the replica served, the group coordinator, who it says it is, the memory
/// bound of fetch responses, and the incremental fetch sessions.
pub struct Endpoint {
    replica: Arc<dyn Replica>,
    groups: Coordinator,
    config: ServeConfig,
    fetch_memory: Arc<Semaphore>,
    sessions: sessions::FetchSessions,
    /// Record bytes answered straight from segment files (`sendfile`).
    sent_from_files: AtomicU64,
}

impl Endpoint {
    pub fn new(replica: Arc<dyn Replica>, groups: Coordinator, config: ServeConfig) -> Self {
        let permits = config.limits.fetch_memory_bytes.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            replica,
            groups,
            fetch_memory: Arc::new(Semaphore::new(permits)),
            sent_from_files: AtomicU64::new(0),
            config,
            sessions: sessions::FetchSessions::new(FetchSessionLimits::default()),
        }
    }

    /// The same endpoint with other fetch session bounds (`slots: 0` serves every fetch without a session).
    pub fn with_fetch_sessions(mut self, limits: FetchSessionLimits) -> Self {
        self.sessions = sessions::FetchSessions::new(limits);
        self
    }

    pub fn limits(&self) -> &Limits {
        &self.config.limits
    }

    /// Record bytes answered straight from segment files so far (plaintext clients of a mirror).
    pub fn sent_from_files(&self) -> u64 {
        self.sent_from_files.load(Ordering::Relaxed)
    }

    pub fn replica(&self) -> &Arc<dyn Replica> {
        &self.replica
    }

    /// Decode the body of a request whose header was read, answer it, encode the answer. `host`: the client's
    /// address as group members show it; `zero_copy`: the connection can send records straight from files.
    pub async fn handle(
        &self,
        header: &RequestHeader,
        api_key: ApiKey,
        mut body: Bytes,
        host: &str,
        zero_copy: bool,
    ) -> Outcome {
        let version = header.request_api_version;
        if api_key == ApiKey::ApiVersions {
            // Answered whatever its version: an unsupported one gets UNSUPPORTED_VERSION and the table in v0.
            return versions::answer(version, &mut body);
        }
        if !served(api_key, version) {
            return Outcome::Unsupported;
        }
        let request = match RequestKind::decode(api_key, &mut body, version) {
            Ok(request) => request,
            Err(e) => return Outcome::Malformed(format!("{api_key:?} v{version}: {e:#}")),
        };
        let mut permit = None;
        let response = match request {
            RequestKind::Metadata(r) => ResponseKind::Metadata(metadata::answer(self, r, version)),
            RequestKind::ListOffsets(r) => ResponseKind::ListOffsets(offsets::list(self, r).await),
            RequestKind::OffsetForLeaderEpoch(r) => ResponseKind::OffsetForLeaderEpoch(offsets::epochs(self, r).await),
            RequestKind::Fetch(r) => {
                let answer = fetch::answer(self, r, version, zero_copy).await;
                if !answer.placeholders.is_empty() {
                    let mut spliced = Spliced::new(answer.placeholders);
                    return match answer.response.encode(&mut spliced, version) {
                        Ok(()) => {
                            let pieces = spliced.finish();
                            let from_files: u64 = pieces
                                .iter()
                                .filter(|p| matches!(p, Piece::File(_)))
                                .map(Piece::len)
                                .sum();
                            self.sent_from_files.fetch_add(from_files, Ordering::Relaxed);
                            Outcome::RespondSpliced(pieces, answer.permit)
                        }
                        Err(e) => Outcome::Malformed(format!("encoding the answer to Fetch v{version}: {e:#}")),
                    };
                }
                permit = answer.permit;
                ResponseKind::Fetch(answer.response)
            }
            RequestKind::DescribeConfigs(r) => ResponseKind::DescribeConfigs(configs::answer(self, r)),
            RequestKind::Produce(r) => ResponseKind::Produce(refuse::produce(self, r)),
            RequestKind::InitProducerId(r) => ResponseKind::InitProducerId(refuse::init_producer_id(self, r)),
            RequestKind::FindCoordinator(r) => {
                ResponseKind::FindCoordinator(groups::find_coordinator(self, r, version))
            }
            other => match groups::answer(self, other, version, header, host).await {
                Some(response) => response,
                None => return Outcome::Unsupported,
            },
        };
        let mut out = BytesMut::new();
        match response.encode(&mut out, version) {
            Ok(()) => Outcome::Respond(out, permit),
            // Our own answer does not fit the version asked: a bug here, not the client's; end the connection
            // rather than send bytes the client would misread.
            Err(e) => Outcome::Malformed(format!("encoding the answer to {api_key:?} v{version}: {e:#}")),
        }
    }
}

/// Whether `version` of `api_key` is served.
fn served(api_key: ApiKey, version: i16) -> bool {
    SERVED
        .iter()
        .any(|&(key, min, max)| key == api_key && (min..=max).contains(&version))
}

/// A Kafka string of ours.
fn text(s: impl Into<String>) -> kafka_protocol::protocol::StrBytes {
    kafka_protocol::protocol::StrBytes::from_string(s.into())
}
