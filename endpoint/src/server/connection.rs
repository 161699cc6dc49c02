//! One client connection: size-prefixed request frames in, size-prefixed response frames out, one at a time.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::Decodable;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::handle::{Endpoint, Outcome};

/// The largest request read by default. A consumer's requests are small (a Fetch of ten thousand partitions is
/// well under 1 MiB); a producer's Produce, read only to be refused, is as large as its `max.request.size`
/// (1 MiB by default), so 8 MiB leaves room and still bounds a client at a few MiB.
pub const MAX_REQUEST_BYTES_DEFAULT: usize = 8 << 20;

/// Why a connection ended other than by the client closing it.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("request frame of {0} bytes refused (the limit is {1})")]
    TooLarge(i64, usize),
    #[error("idle for {0:?}")]
    Idle(std::time::Duration),
    #[error("did not take its response within {0:?}")]
    Stalled(std::time::Duration),
    #[error("malformed request: {0}")]
    Malformed(String),
    #[error("api key {0} version {1} is not served")]
    Unsupported(i16, i16),
}

pub(super) struct Connection<'a, S> {
    stream: S,
    endpoint: &'a Endpoint,
    /// The client's address as group members show it (DescribeGroups' client host).
    host: String,
}

impl<'a, S: AsyncRead + AsyncWrite + Unpin> Connection<'a, S> {
    pub(super) fn new(stream: S, endpoint: &'a Endpoint, peer: Option<std::net::SocketAddr>) -> Self {
        // Kafka shows a member's host as "/<ip>".
        let host = peer.map_or_else(String::new, |p| format!("/{}", p.ip()));
        Self { stream, endpoint, host }
    }

    pub(super) async fn run(mut self) -> Result<(), ConnectionError> {
        loop {
            let Some(frame) = self.read_frame().await? else {
                return Ok(());
            };
            let request = parse(frame)?;
            let response = match self
                .endpoint
                .handle(&request.header, request.api_key, request.body, &self.host)
                .await
            {
                Outcome::Respond(body, permit) => (body, permit),
                Outcome::Unsupported => {
                    return Err(ConnectionError::Unsupported(
                        request.header.request_api_key,
                        request.header.request_api_version,
                    ))
                }
                Outcome::Malformed(reason) => return Err(ConnectionError::Malformed(reason)),
            };
            let (body, _permit) = response;
            self.write_response(request.response_header_version, request.header.correlation_id, body)
                .await?;
        }
    }

    /// The next request frame, or `None` when the client closed between requests.
    async fn read_frame(&mut self) -> Result<Option<Bytes>, ConnectionError> {
        let limits = self.endpoint.limits();
        let mut size = [0u8; 4];
        match tokio::time::timeout(limits.idle, self.stream.read_exact(&mut size)).await {
            Err(_) => return Err(ConnectionError::Idle(limits.idle)),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Ok(Err(e)) => return Err(e.into()),
            Ok(Ok(_)) => {}
        }
        let declared = i32::from_be_bytes(size);
        let len = usize::try_from(declared)
            .ok()
            .filter(|&len| (4..=limits.max_request_bytes).contains(&len))
            .ok_or(ConnectionError::TooLarge(i64::from(declared), limits.max_request_bytes))?;
        let mut body = BytesMut::zeroed(len);
        // A client that declared a frame must send it promptly: the idle limit bounds a slow body too.
        match tokio::time::timeout(limits.idle, self.stream.read_exact(&mut body)).await {
            Err(_) => Err(ConnectionError::Idle(limits.idle)),
            Ok(Err(e)) => Err(e.into()),
            Ok(Ok(_)) => Ok(Some(body.freeze())),
        }
    }

    async fn write_response(
        &mut self,
        header_version: i16,
        correlation_id: i32,
        body: BytesMut,
    ) -> Result<(), ConnectionError> {
        // Response header v0: the correlation id; v1 adds an empty tagged-field section (one zero byte).
        let header_len = if header_version >= 1 { 5 } else { 4 };
        let total = header_len + body.len();
        let size = i32::try_from(total).map_err(|_| std::io::Error::other("response larger than 2 GiB"))?;
        let mut head = Vec::with_capacity(4 + header_len);
        head.extend_from_slice(&size.to_be_bytes());
        head.extend_from_slice(&correlation_id.to_be_bytes());
        if header_version >= 1 {
            head.push(0);
        }
        let timeout = self.endpoint.limits().write_timeout;
        let write = async {
            self.stream.write_all(&head).await?;
            self.stream.write_all(&body).await?;
            self.stream.flush().await
        };
        match tokio::time::timeout(timeout, write).await {
            Ok(written) => Ok(written?),
            Err(_) => Err(ConnectionError::Stalled(timeout)),
        }
    }
}

struct Request {
    header: RequestHeader,
    api_key: ApiKey,
    response_header_version: i16,
    body: Bytes,
}

/// The header of a request frame, decoded with the header version its api key and version call for.
fn parse(mut frame: Bytes) -> Result<Request, ConnectionError> {
    if frame.len() < 8 {
        return Err(ConnectionError::Malformed(format!(
            "a frame of {} bytes holds no header",
            frame.len()
        )));
    }
    let key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let api_key = ApiKey::try_from(key).map_err(|()| ConnectionError::Unsupported(key, version))?;
    let (header_version, response_header_version) = match api_key {
        // ApiVersions is answered whatever its version (with UNSUPPORTED_VERSION when out of range), so its
        // header is read the way every version shares: v1 for 0-2, v2 for 3 and later.
        ApiKey::ApiVersions => (if version >= 3 { 2 } else { 1 }, 0),
        api if version >= api.valid_versions().min && version <= api.valid_versions().max => (
            api.request_header_version(version),
            api.response_header_version(version),
        ),
        _ => return Err(ConnectionError::Unsupported(key, version)),
    };
    let header = RequestHeader::decode(&mut frame, header_version)
        .map_err(|e| ConnectionError::Malformed(format!("request header: {e:#}")))?;
    Ok(Request {
        header,
        api_key,
        response_header_version,
        body: frame,
    })
}
