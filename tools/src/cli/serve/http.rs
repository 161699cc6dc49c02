//! A minimal HTTP/1.1 server for `/metrics` and the admin API: one request per connection (`Connection: close`),
//! bounded in size and time.
//!
//! Why not hyper's server: hyper 1 is in the build only with its client features (object_store's reqwest);
//! turning on `server` changes hyper's features for the whole workspace and rebuilds hyper, reqwest, object_store
//! and every crate above them, for an endpoint that answers a scraper every few seconds and an operator's curl.
//! What such clients send is small and simple: a request line, headers, an optional `Content-Length` body. That is
//! all this reads; anything else (chunked bodies, a request over [`MAX_REQUEST_BYTES`], a client slower than
//! [`REQUEST_TIMEOUT`]) gets a 4xx and the connection closed, so a bad client costs one task for a few seconds.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Largest request read, head and body (64 KiB: an admin body is a regex).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// How long a client may take to send its request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

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
        _ => "Unknown",
    }
}

/// What answers requests.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, request: Request) -> impl std::future::Future<Output = Response> + Send;
}

/// Serves `listener` until `shutdown`, one task per connection.
pub async fn serve<H: Handler>(listener: TcpListener, handler: Arc<H>, shutdown: CancellationToken) {
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
        let handler = handler.clone();
        tokio::spawn(async move {
            if let Err(e) = connection(stream, handler).await {
                tracing::debug!(%peer, error = %e, "metrics/admin connection");
            }
        });
    }
}

async fn connection<H: Handler>(mut stream: TcpStream, handler: Arc<H>) -> std::io::Result<()> {
    let response = match tokio::time::timeout(REQUEST_TIMEOUT, read_request(&mut stream)).await {
        Err(_) => Response::error(408, "the request was not received in time"),
        Ok(Err(e)) => return Err(e),
        Ok(Ok(Err(refusal))) => refusal,
        Ok(Ok(Ok(request))) => handler.handle(request).await,
    };
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        response.status,
        reason(response.status),
        response.content_type,
        response.body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(&response.body).await?;
    stream.shutdown().await
}

/// Reads one request; `Ok(Err(response))` for a request refused before it reaches the handler.
async fn read_request(stream: &mut TcpStream) -> std::io::Result<Result<Request, Response>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = find(&buf, b"\r\n\r\n") {
            break i;
        }
        if buf.len() >= MAX_REQUEST_BYTES {
            return Ok(Err(Response::error(413, "request head too large")));
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed before a whole request head",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = match std::str::from_utf8(&buf[..head_end]) {
        Ok(h) => h.to_string(),
        Err(_) => return Ok(Err(Response::error(400, "the request head is not UTF-8"))),
    };
    let (request, length) = match parse_head(&head) {
        Ok(pair) => pair,
        Err(refusal) => return Ok(Err(refusal)),
    };
    if length > MAX_REQUEST_BYTES - head_end {
        return Ok(Err(Response::error(
            413,
            format!("body of {length} bytes is too large"),
        )));
    }
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed before the whole body",
            ));
        }
        body.extend_from_slice(&chunk[..n]);
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
    let mut length = 0usize;
    for header in lines {
        let Some((name, value)) = header.split_once(':') else {
            return Err(Response::error(400, format!("bad header line {header:?}")));
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value
                .parse()
                .map_err(|_| Response::error(400, format!("bad Content-Length {value:?}")))?;
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
        length,
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
        let big = format!("POST /x HTTP/1.1\r\nContent-Length: {}\r\n\r\n", MAX_REQUEST_BYTES);
        assert!(roundtrip(addr, big.as_bytes()).await.starts_with("HTTP/1.1 413 "));
        let endless = vec![b'a'; MAX_REQUEST_BYTES];
        assert!(roundtrip(addr, &endless).await.starts_with("HTTP/1.1 413 "));
        stop.cancel();
        server.await.unwrap();
    }
}
