//! One client connection: size-prefixed request frames in, size-prefixed response frames out, one at a time.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::Decodable;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::handle::{Endpoint, Outcome, Piece};
use crate::replica::FileSpan;

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

/// A client's byte stream, and whether records can be sent to it straight from files.
///
/// A plaintext socket can (`sendfile`: the kernel copies from the page cache to the socket); a TLS stream cannot
/// (the records must be encrypted in this process), nor can an in-memory pipe: those get responses encoded with
/// their records in one buffer.
pub trait ClientStream: AsyncRead + AsyncWrite + Unpin {
    /// Whether [`ClientStream::send_file`] sends.
    fn zero_copy(&self) -> bool {
        false
    }

    /// Send `span` of its file; called only when [`ClientStream::zero_copy`] is true.
    fn send_file(&mut self, span: &FileSpan) -> impl std::future::Future<Output = std::io::Result<()>> {
        let _ = span;
        async { Err(std::io::Error::from(std::io::ErrorKind::Unsupported)) }
    }
}

impl ClientStream for tokio::net::TcpStream {
    fn zero_copy(&self) -> bool {
        true
    }

    async fn send_file(&mut self, span: &FileSpan) -> std::io::Result<()> {
        send_file(self, span).await
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> ClientStream for tokio_rustls::server::TlsStream<S> {}

impl ClientStream for tokio::io::DuplexStream {}

/// `sendfile(2)` of `span` to `socket`, waiting while the socket's buffer is full. A file shorter than the span
/// (truncated since the span was located) ends the response early: an error, so the connection is closed rather
/// than a response sent short of the size it declared.
#[cfg(target_os = "linux")]
async fn send_file(socket: &tokio::net::TcpStream, span: &FileSpan) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let end = span.position.saturating_add(span.len);
    let mut offset = libc::off_t::try_from(span.position).map_err(std::io::Error::other)?;
    let out = socket.as_raw_fd();
    let from = span.file.as_raw_fd();
    loop {
        let done = u64::try_from(offset).unwrap_or(u64::MAX);
        if done >= end {
            return Ok(());
        }
        // At most 1 GiB per call (Linux sends at most about 2 GiB per call anyway).
        let count = usize::try_from((end - done).min(1 << 30)).unwrap_or(1 << 30);
        socket.writable().await?;
        let sent = socket.try_io(tokio::io::Interest::WRITABLE, || {
            // SAFETY: both descriptors are open for the duration of the call (the socket is borrowed, the file is
            // held by `span`), and `offset` is a valid, exclusively borrowed `off_t`.
            let n = unsafe { libc::sendfile(out, from, &mut offset, count) };
            if n < 0 {
                Err(std::io::Error::last_os_error())
            } else {
                Ok(n)
            }
        });
        match sent {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the segment file ended before the records being sent",
                ))
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}

/// Without `sendfile(2)`: the span read and written through one buffer.
#[cfg(not(target_os = "linux"))]
async fn send_file(socket: &mut tokio::net::TcpStream, span: &FileSpan) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut buf = vec![0u8; 64 << 10];
    let mut at = span.position;
    let end = span.position.saturating_add(span.len);
    while at < end {
        let want = usize::try_from((end - at).min(buf.len() as u64)).unwrap_or(buf.len());
        let n = span.file.read_at(&mut buf[..want], at)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        socket.write_all(&buf[..n]).await?;
        at += n as u64;
    }
    Ok(())
}

pub(super) struct Connection<'a, S> {
    stream: S,
    endpoint: &'a Endpoint,
    /// The client's address as group members show it (DescribeGroups' client host).
    host: String,
}

impl<'a, S: ClientStream> Connection<'a, S> {
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
            let zero_copy = self.stream.zero_copy();
            let response = match self
                .endpoint
                .handle(&request.header, request.api_key, request.body, &self.host, zero_copy)
                .await
            {
                Outcome::Respond(body, permit) => (vec![Piece::Bytes(body.freeze())], permit),
                Outcome::RespondSpliced(pieces, permit) => (pieces, permit),
                Outcome::Unsupported => {
                    return Err(ConnectionError::Unsupported(
                        request.header.request_api_key,
                        request.header.request_api_version,
                    ))
                }
                Outcome::Malformed(reason) => return Err(ConnectionError::Malformed(reason)),
            };
            let (pieces, _permit) = response;
            self.write_response(request.response_header_version, request.header.correlation_id, pieces)
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
        pieces: Vec<Piece>,
    ) -> Result<(), ConnectionError> {
        // Response header v0: the correlation id; v1 adds an empty tagged-field section (one zero byte).
        let header_len = if header_version >= 1 { 5 } else { 4 };
        let total = header_len as u64 + pieces.iter().map(Piece::len).sum::<u64>();
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
            for piece in &pieces {
                match piece {
                    Piece::Bytes(bytes) => self.stream.write_all(bytes).await?,
                    Piece::File(span) => {
                        self.stream.flush().await?;
                        self.stream.send_file(span).await?;
                    }
                }
            }
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
