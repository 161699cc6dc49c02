//! A plain HTTP/1.1 client for the services' `--metrics-addr` (metrics and admin API), and a reader of the
//! Prometheus text format they answer.
//!
//! Why hand-written: one request per connection on loopback, as the services serve it (`Connection: close`); the
//! test crate needs no HTTP client dependency for that.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// `METHOD path` with `body` to `addr`; the status and the body.
pub fn request(addr: &str, method: &str, path: &str, body: &str) -> Result<(u16, String)> {
    let mut stream = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = String::new();
    stream
        .read_to_string(&mut raw)
        .with_context(|| format!("reading the answer to {method} {path}"))?;
    let Some((head, body)) = raw.split_once("\r\n\r\n") else {
        bail!("{method} {path}: no header end in {raw:?}");
    };
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("{method} {path}: no status in {head:?}"))?;
    Ok((status, body.to_string()))
}

/// `GET /metrics` of `addr`: every sample, keyed by its name and labels as written (`name{a="b",...}`).
pub fn scrape(addr: &str) -> Result<BTreeMap<String, f64>> {
    let (status, text) = request(addr, "GET", "/metrics", "")?;
    if status != 200 {
        bail!("GET /metrics of {addr}: {status} {text}");
    }
    parse_samples(&text)
}

/// The sample lines of a text exposition (comments skipped).
pub fn parse_samples(text: &str) -> Result<BTreeMap<String, f64>> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (key, value) = line
            .rsplit_once(' ')
            .with_context(|| format!("bad sample line {line:?}"))?;
        let value: f64 = value.parse().with_context(|| format!("bad value in {line:?}"))?;
        out.insert(key.to_string(), value);
    }
    Ok(out)
}

/// The key of a per-partition sample: `name{link="..",topic="..",partition=".."}`.
pub fn partition_key(name: &str, link: &str, topic: &str, partition: i32) -> String {
    format!("{name}{{link=\"{link}\",topic=\"{topic}\",partition=\"{partition}\"}}")
}
