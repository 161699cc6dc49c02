//! A minimal HTTP/1.1 server for `/metrics` and the admin API: one request per connection (`Connection: close`),
//! bounded in size, time and number.
//!
//! Why not hyper's server: hyper 1 is in the build only with its client features (object_store's reqwest);
//! turning on `server` changes hyper's features for the whole workspace and rebuilds hyper, reqwest, object_store
//! and every crate above them, for an endpoint that answers a scraper every few seconds and an operator's curl.
//! What such clients send is small and simple: a request line, headers, an optional `Content-Length` body. That is
//! all this reads.
//!
//! Why every bound: the port is open to whoever reaches it, in the process that appends to the mirror, so nothing
//! a client does may cost that process more than a fixed amount ([`Limits`]). A head over [`MAX_HEAD_BYTES`] or a
//! body claimed over [`MAX_BODY_BYTES`] gets 413 before the body is read (a claim of 1 GiB costs nothing); a
//! client slower than [`REQUEST_TIMEOUT`] gets 408, one that does not read its answer is dropped after
//! [`RESPONSE_TIMEOUT`]; beyond [`MAX_CONNECTIONS`] at once a connection is answered 503 and closed at once,
//! without waiting, so idle clients cannot take the descriptors the mirror's own files need.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Largest request head read: the request line and the headers, with the blank line that ends them.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Largest body read (an admin body is a regex).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Most connections served at once (a scraper and an operator need a few).
pub const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send its request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long writing an answer may take (a client that does not read it).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// The bounds a server keeps; [`Limits::default`] is the constants above (tests shrink them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_head_bytes: usize,
    pub max_body_bytes: usize,
    pub max_connections: usize,
    pub request_timeout: Duration,
    pub response_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_head_bytes: MAX_HEAD_BYTES,
            max_body_bytes: MAX_BODY_BYTES,
            max_connections: MAX_CONNECTIONS,
            request_timeout: REQUEST_TIMEOUT,
            response_timeout: RESPONSE_TIMEOUT,
        }
    }
}

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The path without the query string.
    pub path: String,
    pub body: Vec<u8>,
}

/// A response to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Response {
    pub fn json(status: u16, value: &serde_json::Value) -> Response {
        Response {
            status,
            content_type: "application/json",
            body: serde_json::to_vec_pretty(value).unwrap_or_default(),
        }
    }

    /// `{"error": message}` with `status`.
    pub fn error(status: u16, message: impl Into<String>) -> Response {
        Response::json(status, &serde_json::json!({ "error": message.into() }))
    }

    /// The whole answer on the wire: status line, headers, body.
    fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.status,
            reason(self.status),
            self.content_type,
            self.body.len()
        )
        .into_bytes();
        out.extend_from_slice(&self.body);
        out
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Payload Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Unknown",
    }
}

/// What answers requests.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, request: Request) -> impl std::future::Future<Output = Response> + Send;
}

/// Serves `listener` until `shutdown` within the default [`Limits`].
pub async fn serve<H: Handler>(listener: TcpListener, handler: Arc<H>, shutdown: CancellationToken) {
    serve_with(listener, handler, shutdown, Limits::default()).await
}

/// Serves `listener` until `shutdown`, one task per connection and at most `limits.max_connections` of them.
pub async fn serve_with<H: Handler>(
    listener: TcpListener,
    handler: Arc<H>,
    shutdown: CancellationToken,
    limits: Limits,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics/admin listener: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refuse_busy(&stream, limits.max_connections);
            tracing::debug!(%peer, "metrics/admin connection refused: {} connections open", limits.max_connections);
            continue;
        };
        let handler = handler.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(stream, handler, limits).await {
                tracing::debug!(%peer, error = %e, "metrics/admin connection");
            }
            drop(slot);
        });
    }
}

/// Answers 503 to a connection over the cap in one non-blocking write (whatever the socket takes now; a client
/// that reads nothing gets the close alone) and closes it: nothing waits on a client the server has no room for.
fn refuse_busy(stream: &TcpStream, max_connections: usize) {
    let answer = Response::error(
        503,
        format!("{max_connections} connections are open to this port: try again shortly"),
    );
    let _ = stream.try_write(&answer.to_bytes());
}

async fn connection<H: Handler>(mut stream: TcpStream, handler: Arc<H>, limits: Limits) -> std::io::Result<()> {
    let response = match tokio::time::timeout(limits.request_timeout, read_request(&mut stream, &limits)).await {
        Err(_) => Response::error(408, "the request was not received in time"),
        Ok(Err(e)) => return Err(e),
        Ok(Ok(Err(refusal))) => refusal,
        Ok(Ok(Ok(request))) => handler.handle(request).await,
    };
    let write = async {
        stream.write_all(&response.to_bytes()).await?;
        stream.shutdown().await
    };
    match tokio::time::timeout(limits.response_timeout, write).await {
        Ok(written) => written,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "the client did not read the answer in time",
        )),
    }
}

/// Reads one request; `Ok(Err(response))` for a request refused before it reaches the handler. Never reads more
/// than `limits.max_head_bytes` before the head's end, nor a body over `limits.max_body_bytes`.
async fn read_request(stream: &mut TcpStream, limits: &Limits) -> std::io::Result<Result<Request, Response>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut scanned = 0usize;
    let head_len = loop {
        // The terminator may straddle two reads: look again from three bytes before the new ones.
        if let Some(i) = find(&buf[scanned.saturating_sub(3)..], b"\r\n\r\n") {
            break scanned.saturating_sub(3) + i + 4;
        }
        scanned = buf.len();
        let room = limits.max_head_bytes - buf.len();
        if room == 0 {
            return Ok(Err(Response::error(
                413,
                format!("request head over {} bytes", limits.max_head_bytes),
            )));
        }
        let want = room.min(chunk.len());
        let n = stream.read(&mut chunk[..want]).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed before a whole request head",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = match std::str::from_utf8(&buf[..head_len - 4]) {
        Ok(h) => h.to_string(),
        Err(_) => return Ok(Err(Response::error(400, "the request head is not UTF-8"))),
    };
    let (request, length) = match parse_head(&head) {
        Ok(pair) => pair,
        Err(refusal) => return Ok(Err(refusal)),
    };
    if length > limits.max_body_bytes {
        return Ok(Err(Response::error(
            413,
            format!("a body of {length} bytes is over {} bytes", limits.max_body_bytes),
        )));
    }
    let mut body = buf.split_off(head_len);
    if body.len() < length {
        let have = body.len();
        body.resize(length, 0);
        stream
            .read_exact(&mut body[have..])
            .await
            .map_err(|e| std::io::Error::new(e.kind(), format!("closed before the whole body: {e}")))?;
    }
    body.truncate(length);
    Ok(Ok(Request { body, ..request }))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The request line and the body's length from a request head.
pub fn parse_head(head: &str) -> Result<(Request, usize), Response> {
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Response::error(400, format!("bad request line {line:?}")));
    };
    if !version.starts_with("HTTP/1.") {
        return Err(Response::error(400, format!("unsupported protocol {version:?}")));
    }
    let mut length: Option<usize> = None;
    for header in lines {
        let Some((name, value)) = header.split_once(':') else {
            return Err(Response::error(400, format!("bad header line {header:?}")));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let parsed: usize = value
                .parse()
                .map_err(|_| Response::error(400, format!("bad Content-Length {value:?}")))?;
            if length.is_some_and(|l| l != parsed) {
                return Err(Response::error(400, "two different Content-Length headers"));
            }
            length = Some(parsed);
        } else if name.eq_ignore_ascii_case("transfer-encoding") && !value.eq_ignore_ascii_case("identity") {
            return Err(Response::error(411, "chunked bodies are not read: send Content-Length"));
        }
    }
    let path = target.split('?').next().unwrap_or_default().to_string();
    Ok((
        Request {
            method: method.to_string(),
            path,
            body: Vec::new(),
        },
        length.unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_head_gives_method_path_and_length() {
        let (r, n) = parse_head("PUT /v1/links/dr/topics-regex?x=1 HTTP/1.1\r\nHost: a\r\ncontent-length: 12").unwrap();
        assert_eq!(
            (r.method.as_str(), r.path.as_str(), n),
            ("PUT", "/v1/links/dr/topics-regex", 12)
        );
        assert_eq!(parse_head("GET /metrics HTTP/1.0").unwrap().1, 0);
        for bad in [
            "GET /metrics",
            "GET  /metrics HTTP/1.1",
            "GET /metrics SPDY/3",
            "GET / HTTP/1.1\r\nnocolon",
        ] {
            assert_eq!(parse_head(bad).unwrap_err().status, 400, "{bad:?}");
        }
        let chunked = parse_head("POST / HTTP/1.1\r\nTransfer-Encoding: chunked").unwrap_err();
        assert_eq!(chunked.status, 411);
        assert_eq!(
            parse_head("POST / HTTP/1.1\r\nContent-Length: -1").unwrap_err().status,
            400
        );
        let twice = "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 1073741824";
        assert_eq!(parse_head(twice).unwrap_err().status, 400);
        let same = "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5";
        assert_eq!(parse_head(same).unwrap().1, 5);
    }

    struct Echo;
    impl Handler for Echo {
        async fn handle(&self, r: Request) -> Response {
            Response {
                status: 200,
                content_type: "text/plain",
                body: format!("{} {} {}", r.method, r.path, String::from_utf8_lossy(&r.body)).into_bytes(),
            }
        }
    }

    async fn roundtrip(addr: std::net::SocketAddr, raw: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(raw).await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn the_server_answers_and_refuses_oversized_requests() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, Arc::new(Echo), stop.clone()));
        // The body arrives in a second write: read up to Content-Length.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nab")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        s.write_all(b"cde").await.unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200 OK\r\n"), "{out}");
        assert!(
            out.contains("Content-Length: 13\r\n") && out.ends_with("\r\n\r\nPOST /x abcde"),
            "{out}"
        );
        let big = format!("POST /x HTTP/1.1\r\nContent-Length: {}\r\n\r\n", MAX_BODY_BYTES + 1);
        assert!(roundtrip(addr, big.as_bytes()).await.starts_with("HTTP/1.1 413 "));
        let endless = vec![b'a'; MAX_HEAD_BYTES];
        assert!(roundtrip(addr, &endless).await.starts_with("HTTP/1.1 413 "));
        stop.cancel();
        server.await.unwrap();
    }
}
