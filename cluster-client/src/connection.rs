//! One connection to a Kafka broker: the 4-byte size framing, the request header, `ApiVersions` once, and every
//! request after it bounded in time and every response in size.
//!
//! Why one place: the shipper asks the source for high watermarks (`ListOffsets`, `Metadata`) and a failover asks
//! the target to create topics and commit offsets; both speak the same framing over the maintained `kafka-protocol`
//! crate's encoders, so it lives here once.
//!
//! Bounds: a connection, a request's write and its response each wait at most the connection's timeout; a
//! response is at most [`MAX_RESPONSE_BYTES`]; a peer must echo this connection's correlation id before a body is
//! decoded (a port speaking another protocol does not). The crate's decoder sizes arrays by their declared count
//! before reading them, so a hostile peer posing as a broker could still make it allocate; brokers are trusted
//! peers here, the bound is against mistakes (an HTTP port reads as a 1.2 GB frame).

use std::time::{Duration, SystemTime};

use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::{ApiKey, ApiVersionsRequest, ApiVersionsResponse, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::{error_name, Error, Result};

/// Largest response read (8 MiB): a metadata or offset answer costs tens of bytes per partition, so this fits
/// hundreds of thousands; a larger size prefix is a peer that is not a Kafka broker (an HTTP reply reads as ~1.2 GB).
pub const MAX_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

/// The `ApiVersions` request version sent first (3: the first with the client software name; every broker since
/// Kafka 2.4 speaks it; an older one answers in version 0, which the crate cannot read: refused as an error).
const API_VERSIONS_VERSION: i16 = 3;

/// What the broker offers for one API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offered {
    pub min: i16,
    pub max: i16,
}

/// One connection to a broker speaking the Kafka protocol.
pub struct Connection {
    broker: String,
    stream: TcpStream,
    correlation_id: i32,
    client_id: &'static str,
    /// `(api key, offered)` from the broker's `ApiVersions` answer.
    offered: Vec<(i16, Offered)>,
    timeout: Duration,
}

impl Connection {
    /// Dial `broker` (HOST:PORT) and ask which API versions it speaks. `client_id` is what the broker logs.
    pub async fn connect(broker: &str, client_id: &'static str, timeout: Duration) -> Result<Self> {
        let stream = match tokio::time::timeout(timeout, TcpStream::connect(broker)).await {
            Err(_) => return Err(broker_error(broker, format!("no connection within {timeout:?}"))),
            Ok(Err(e)) => return Err(broker_error(broker, format!("cannot connect: {e}"))),
            Ok(Ok(s)) => s,
        };
        // Small requests, answered one at a time: no Nagle delay.
        let _ = stream.set_nodelay(true);
        // A correlation id a peer must echo, different per connection.
        let start = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(1, |d| (d.subsec_nanos() & 0x3fff_ffff) as i32);
        let mut connection = Connection {
            broker: broker.to_string(),
            stream,
            correlation_id: start,
            client_id,
            offered: Vec::new(),
            timeout,
        };
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("segmirror"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let versions: ApiVersionsResponse = connection
            .call(ApiKey::ApiVersions, &request, API_VERSIONS_VERSION)
            .await?;
        if versions.error_code != 0 {
            return Err(connection.error(format!("ApiVersions answered {}", error_name(versions.error_code))));
        }
        connection.offered = versions
            .api_keys
            .iter()
            .map(|k| {
                (
                    k.api_key,
                    Offered {
                        min: k.min_version,
                        max: k.max_version,
                    },
                )
            })
            .collect();
        Ok(connection)
    }

    /// The HOST:PORT this connection dialled.
    pub fn broker(&self) -> &str {
        &self.broker
    }

    /// The address of the broker this connection reached.
    pub fn peer_addr(&self) -> Option<std::net::SocketAddr> {
        self.stream.peer_addr().ok()
    }

    /// The versions the broker offers for `key`, if any.
    pub fn offered(&self, key: ApiKey) -> Option<Offered> {
        self.offered.iter().find(|(k, _)| *k == key as i16).map(|(_, o)| *o)
    }

    /// The highest version of `M` (the request of `key`) both sides speak, at least `min`; an error naming both
    /// ranges when there is none.
    pub fn version<M: Message>(&self, key: ApiKey, min: i16) -> Result<i16> {
        let ours = M::VERSIONS;
        let theirs = self
            .offered(key)
            .ok_or_else(|| self.error(format!("the broker does not offer {key:?}")))?;
        let max = theirs.max.min(ours.max);
        let low = theirs.min.max(ours.min).max(min);
        if max < low {
            return Err(self.error(format!(
                "no common {key:?} version: the broker speaks {}..={}, segmirror {}..={}",
                theirs.min,
                theirs.max,
                ours.min.max(min),
                ours.max
            )));
        }
        Ok(max)
    }

    /// An error about this broker.
    pub fn error(&self, reason: String) -> Error {
        broker_error(&self.broker, reason)
    }

    /// Send one request and read its response, each bounded in time and size. (Generic over encode/decode rather
    /// than the crate's `Request`, which it implements only with both its client and broker halves built.)
    pub async fn call<Q: Encodable, P: Decodable>(&mut self, key: ApiKey, request: &Q, version: i16) -> Result<P> {
        self.correlation_id = self.correlation_id.wrapping_add(1) & i32::MAX;
        let correlation_id = self.correlation_id;
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str(self.client_id)));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, key.request_header_version(version))
            .and_then(|()| request.encode(&mut body, version))
            .map_err(|e| self.error(format!("encoding {key:?} v{version}: {e}")))?;
        let len = u32::try_from(body.len()).map_err(|_| self.error(format!("{key:?} request too large")))?;
        let mut frame = BytesMut::with_capacity(body.len() + 4);
        frame.put_u32(len);
        frame.extend_from_slice(&body);
        let timeout = self.timeout;
        match tokio::time::timeout(timeout, self.stream.write_all(&frame)).await {
            Err(_) => return Err(self.error(format!("{key:?} request not sent within {timeout:?}"))),
            Ok(Err(e)) => return Err(self.error(format!("sending {key:?}: {e}"))),
            Ok(Ok(())) => {}
        }
        let mut response = match tokio::time::timeout(timeout, read_frame(&mut self.stream)).await {
            Err(_) => return Err(self.error(format!("no {key:?} response within {timeout:?}"))),
            Ok(Err(reason)) => return Err(self.error(format!("reading the {key:?} response: {reason}"))),
            Ok(Ok(b)) => b,
        };
        let header = ResponseHeader::decode(&mut response, key.response_header_version(version))
            .map_err(|e| self.error(format!("malformed {key:?} response header: {e}")))?;
        if header.correlation_id != correlation_id {
            return Err(self.error(format!(
                "the {key:?} response carries correlation id {} where {correlation_id} was sent: not a Kafka broker, or out of step",
                header.correlation_id
            )));
        }
        P::decode(&mut response, version).map_err(|e| self.error(format!("malformed {key:?} v{version} response: {e}")))
    }
}

/// One size-prefixed frame, at most [`MAX_RESPONSE_BYTES`].
pub async fn read_frame(stream: &mut TcpStream) -> std::result::Result<bytes::Bytes, String> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).await.map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => "the broker closed the connection".to_string(),
        _ => e.to_string(),
    })?;
    let size = i32::from_be_bytes(size);
    let len = usize::try_from(size)
        .ok()
        .filter(|&n| (4..=MAX_RESPONSE_BYTES).contains(&n))
        .ok_or_else(|| {
            format!("a response size of {size} bytes (at least 4, at most {MAX_RESPONSE_BYTES}): not a Kafka broker")
        })?;
    let mut body = BytesMut::zeroed(len);
    stream
        .read_exact(&mut body)
        .await
        .map_err(|e| format!("{e} ({len}-byte response cut short)"))?;
    Ok(body.freeze())
}

fn broker_error(broker: &str, reason: String) -> Error {
    Error::Broker {
        broker: broker.to_string(),
        reason,
    }
}
