//! `endpoint_requests`: the read-only Kafka endpoint (`segmirror serve`) on hostile request bytes.
//!
//! A client of the endpoint is as untrusted as a peer of the direct link. The bytes go through the real
//! connection (`segmirror_endpoint::server::serve_connection`) over an in-memory pipe, into the real handlers, the
//! group coordinator and a real `MirrorReplica` (one topic, nothing installed). Properties: no panic, no
//! allocation sized by an unchecked length (the vendored `kafka-protocol` bounds array capacities), the
//! connection ends (the input is finite), and every response frame is whole: a size prefix followed by that many
//! bytes starting with a correlation id.
//!
//! Input: with an even first byte, the rest is the raw byte stream a client sends; with an odd one, the rest is a
//! list of `(u16 length, body)` pairs, each sent as a frame with a correct size prefix, so the fuzzer reaches the
//! request decoders without having to guess sizes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use segmirror_endpoint::group::{CommittedOffset, Coordinator, OffsetStore};
use segmirror_endpoint::mirror::{LinkFacts, MirrorReplica, PartitionFacts};
use segmirror_endpoint::server::serve_connection;
use segmirror_endpoint::{Endpoint, Limits, Replica, ReplicaState, ServeConfig, TopicView};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Default)]
struct Offsets(Mutex<BTreeMap<String, Vec<CommittedOffset>>>);

impl OffsetStore for Offsets {
    fn commit(&self, group: &str, offsets: &[CommittedOffset]) -> Result<(), String> {
        let mut all = self.0.lock().map_err(|e| e.to_string())?;
        all.entry(group.to_string()).or_default().extend_from_slice(offsets);
        Ok(())
    }
    fn fetch(&self, group: &str) -> Result<Vec<CommittedOffset>, String> {
        Ok(self.0.lock().map_err(|e| e.to_string())?.get(group).cloned().unwrap_or_default())
    }
    fn groups(&self) -> Result<Vec<String>, String> {
        Ok(self.0.lock().map_err(|e| e.to_string())?.keys().cloned().collect())
    }
}

/// The bytes a client sends for `data` (see the module docs).
fn stream_of(data: &[u8]) -> Vec<u8> {
    let Some((&mode, rest)) = data.split_first() else {
        return Vec::new();
    };
    if mode & 1 == 0 {
        return rest.to_vec();
    }
    let mut out = Vec::new();
    let mut rest = rest;
    while rest.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let body = &rest[2..2 + len];
        out.extend_from_slice(&(len as i32).to_be_bytes());
        out.extend_from_slice(body);
        rest = &rest[2 + len..];
    }
    out
}

pub fn endpoint_requests(data: &[u8]) {
    let input = stream_of(data);
    let root = tempfile::tempdir().expect("temp dir");
    let replica = Arc::new(MirrorReplica::new(root.path(), "east"));
    let failures = replica.refresh(&LinkFacts {
        state: ReplicaState::Replicating,
        topics: vec![TopicView { name: "t".into(), id: [1; 16], partitions: vec![0], configs: Vec::new() }],
        partitions: vec![PartitionFacts { topic: "t".into(), partition: 0, durable_end: None, log_start: 0, committed_end: None }],
    });
    assert!(failures.is_empty(), "{failures:?}");
    let served = replica.clone();
    let groups = Coordinator::new(
        Arc::new(Offsets::default()),
        "east".into(),
        Arc::new(move |topic: &str, partition: i32| served.ends(topic, partition).is_ok()),
    );
    let config = ServeConfig {
        advertised_host: "127.0.0.1".into(),
        advertised_port: 9092,
        node_id: 0,
        cluster_id: "segmirror-east".into(),
        limits: Limits { max_request_bytes: 64 << 10, fetch_memory_bytes: 1 << 20, ..Limits::default() },
    };
    let endpoint = Endpoint::new(replica, groups, config);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let writer = async move {
            let _ = client.write_all(&input).await;
            let _ = client.shutdown().await;
            let mut responses = Vec::new();
            let _ = client.read_to_end(&mut responses).await;
            responses
        };
        let (served, responses) = tokio::join!(serve_connection(server, &endpoint, None), writer);
        let _ = served;
        check_frames(&responses);
    });
}

/// Every response is a whole frame: a size, then that many bytes, the first four a correlation id.
fn check_frames(mut bytes: &[u8]) {
    while !bytes.is_empty() {
        assert!(bytes.len() >= 4, "a response ends inside its size prefix");
        let size = i32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        assert!(size >= 4, "a response frame of {size} bytes holds no correlation id");
        let size = size as usize;
        assert!(bytes.len() >= 4 + size, "a response frame is cut short");
        bytes = &bytes[4 + size..];
    }
}

/// Seeds: a client's first requests as Kafka clients send them (odd mode: each one framed), encoded with the
/// `kafka-protocol` crate's client side.
pub fn seeds() -> Vec<Vec<u8>> {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Encodable, HeaderVersion, StrBytes};

    fn framed<R: Encodable + HeaderVersion>(key: ApiKey, version: i16, request: &R) -> Vec<u8> {
        let mut header = RequestHeader::default();
        header.request_api_key = key as i16;
        header.request_api_version = version;
        header.correlation_id = 1;
        header.client_id = Some(StrBytes::from_static_str("seed"));
        let mut body = bytes::BytesMut::new();
        header.encode(&mut body, R::header_version(version)).expect("header");
        request.encode(&mut body, version).expect("request");
        let mut out = (body.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(&body);
        out
    }
    let mut fetch = FetchRequest::default();
    let mut topic = FetchTopic::default();
    topic.topic = TopicName(StrBytes::from_static_str("t"));
    let mut partition = FetchPartition::default();
    partition.partition_max_bytes = 1 << 20;
    topic.partitions = vec![partition];
    fetch.topics = vec![topic];
    fetch.max_wait_ms = 10;
    fetch.max_bytes = 1 << 20;
    let mut join = JoinGroupRequest::default();
    join.group_id = GroupId(StrBytes::from_static_str("g"));
    join.session_timeout_ms = 10_000;
    join.rebalance_timeout_ms = 10_000;
    join.protocol_type = StrBytes::from_static_str("consumer");
    let mut protocol = JoinGroupRequestProtocol::default();
    protocol.name = StrBytes::from_static_str("range");
    join.protocols = vec![protocol];
    let mut metadata = MetadataRequest::default();
    metadata.topics = None;
    let first = [
        framed(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()),
        framed(ApiKey::Metadata, 12, &metadata),
        framed(ApiKey::Fetch, 12, &fetch),
        framed(ApiKey::JoinGroup, 5, &join),
        framed(ApiKey::ListOffsets, 7, &ListOffsetsRequest::default()),
        framed(ApiKey::Produce, 9, &ProduceRequest::default()),
    ];
    let mut all = vec![[1u8].iter().copied().chain(first.concat()).collect::<Vec<u8>>()];
    all.extend(first.iter().map(|one| [1u8].iter().copied().chain(one.iter().copied()).collect()));
    all
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::{Duration, Instant};

    use super::endpoint_requests;

    /// Inputs the fuzzer found, minimised (`fuzz/regressions/endpoint_requests-*`): a Fetch with a long `max_wait_ms`
    /// and nothing to read spun for the endpoint's whole 30 s wait cap under a paused clock, because the fetch timed
    /// its deadline with the wall clock while it waited on the runtime's (it now uses the runtime's clock for both).
    #[test]
    fn regressions_pass_quickly() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
        let mut replayed = 0;
        for entry in std::fs::read_dir(&dir).expect("fuzz/regressions") {
            let path = entry.expect("a directory entry").path();
            if path.file_name().is_some_and(|n| n.to_string_lossy().starts_with("endpoint_requests-")) {
                let started = Instant::now();
                endpoint_requests(&std::fs::read(&path).expect("a regression input"));
                assert!(started.elapsed() < Duration::from_secs(5), "{} took {:?}", path.display(), started.elapsed());
                replayed += 1;
            }
        }
        assert!(replayed > 0, "no endpoint_requests regression in {}", dir.display());
    }
}
