//! Raw Kafka protocol requests for the endpoint tests: what no stock client sends (malformed and truncated frames,
//! absurd sizes, unknown API keys and versions, a Fetch whose answer is never read), and the few requests whose
//! answers a test compares field by field with the source broker's (Produce v8's error message, ListOffsets v7,
//! OffsetForLeaderEpoch v3).
//!
//! Why by hand: stock clients never send what a hostile one does, and they hide the fields compared here. Requests
//! are encoded big-endian with request header v1 (v2 for flexible versions), just what the tests need; an answer is
//! read only if it declares at most 16 MiB, and waited for at most [`HOSTILE_PATIENCE`].

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

/// How long a hostile connection may stay open without an answer before the test calls it a hang.
pub const HOSTILE_PATIENCE: Duration = Duration::from_secs(10);

/// A request frame: size, api key, version, correlation id, client id (request header v1), body.
pub fn frame(api_key: i16, version: i16, correlation: i32, body: &[u8]) -> Vec<u8> {
    let mut request = Vec::new();
    request.extend(api_key.to_be_bytes());
    request.extend(version.to_be_bytes());
    request.extend(correlation.to_be_bytes());
    request.extend(7i16.to_be_bytes());
    request.extend(b"hostile");
    request.extend(body);
    let mut out = (request.len() as i32).to_be_bytes().to_vec();
    out.extend(request);
    out
}

/// An unsigned varint (the flexible versions' lengths).
pub fn uvarint(mut n: u32, out: &mut Vec<u8>) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// A flexible request frame: request header v2 (the client id, then no tagged fields), body.
pub fn flexible_frame(api_key: i16, version: i16, correlation: i32, body: &[u8]) -> Vec<u8> {
    let mut header_and_body = vec![0u8]; // no tagged fields in the header
    header_and_body.extend(body);
    frame(api_key, version, correlation, &header_and_body)
}

/// A Kafka string: i16 length and the bytes.
pub fn string(s: &str) -> Vec<u8> {
    let mut out = (s.len() as i16).to_be_bytes().to_vec();
    out.extend(s.as_bytes());
    out
}

/// What became of a hostile request.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    /// The endpoint closed the connection.
    Closed,
    /// An answer with this correlation id; the response body after it.
    Answered(i32, Vec<u8>),
    /// Neither within [`HOSTILE_PATIENCE`].
    Hung,
}

pub fn connect(port: u16) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(HOSTILE_PATIENCE)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// Sends `bytes` on a new connection (then closes our half when `half_close`) and sees what comes back.
pub fn send_hostile(port: u16, bytes: &[u8], half_close: bool) -> Outcome {
    let mut stream = connect(port);
    if stream.write_all(bytes).is_err() {
        return Outcome::Closed;
    }
    if half_close {
        let _ = stream.shutdown(Shutdown::Write);
    }
    read_response(&mut stream)
}

pub fn read_response(stream: &mut TcpStream) -> Outcome {
    let mut size = [0u8; 4];
    match stream.read_exact(&mut size) {
        Ok(()) => {}
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            return Outcome::Hung
        }
        Err(_) => return Outcome::Closed,
    }
    let size = i32::from_be_bytes(size);
    assert!((4..=16 << 20).contains(&size), "a response of {size} bytes");
    let mut body = vec![0u8; size as usize];
    if stream.read_exact(&mut body).is_err() {
        return Outcome::Closed;
    }
    let correlation = i32::from_be_bytes(body[..4].try_into().unwrap());
    Outcome::Answered(correlation, body[4..].to_vec())
}

/// ApiVersions v0 on a new connection: the (api key, min, max) the endpoint announces; panics unless it answers
/// with error 0.
pub fn api_versions(port: u16) -> Vec<(i16, i16, i16)> {
    let mut stream = connect(port);
    stream.write_all(&frame(18, 0, 4242, &[])).unwrap();
    let Outcome::Answered(correlation, body) = read_response(&mut stream) else {
        panic!("no ApiVersions answer");
    };
    assert_eq!(correlation, 4242);
    let error = i16::from_be_bytes([body[0], body[1]]);
    assert_eq!(error, 0, "ApiVersions v0 answered error {error}");
    let count = i32::from_be_bytes(body[2..6].try_into().unwrap()) as usize;
    (0..count)
        .map(|i| {
            let at = 6 + i * 6;
            let field = |o: usize| i16::from_be_bytes([body[at + o], body[at + o + 1]]);
            (field(0), field(2), field(4))
        })
        .collect()
}

/// Reads big-endian fields off a response body.
pub struct Cursor<'a>(pub &'a [u8]);

impl Cursor<'_> {
    pub fn take(&mut self, n: usize) -> &[u8] {
        assert!(self.0.len() >= n, "a response shorter than its fields");
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        head
    }
    pub fn i16(&mut self) -> i16 {
        i16::from_be_bytes(self.take(2).try_into().unwrap())
    }
    pub fn i32(&mut self) -> i32 {
        i32::from_be_bytes(self.take(4).try_into().unwrap())
    }
    pub fn i64(&mut self) -> i64 {
        i64::from_be_bytes(self.take(8).try_into().unwrap())
    }
    pub fn nullable_string(&mut self) -> Option<String> {
        let len = self.i16();
        (len >= 0).then(|| String::from_utf8_lossy(self.take(len as usize)).into_owned())
    }
    pub fn uvarint(&mut self) -> u32 {
        let (mut n, mut shift) = (0u32, 0);
        loop {
            let b = self.take(1)[0];
            n |= u32::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return n;
            }
            shift += 7;
        }
    }
    pub fn compact_string(&mut self) -> String {
        let len = self.uvarint() as usize;
        String::from_utf8_lossy(self.take(len.saturating_sub(1))).into_owned()
    }
    pub fn no_tagged_fields(&mut self) {
        assert_eq!(self.uvarint(), 0, "tagged fields in an answer");
    }
}

/// A Produce v8 (acks=-1) of an empty record set to partition 0 of `topic`, on a raw connection: the error code
/// and the error message of the partition's answer.
pub fn raw_produce(port: u16, topic: &str) -> (i16, Option<String>) {
    let mut body = Vec::new();
    body.extend((-1i16).to_be_bytes()); // transactional id: null
    body.extend((-1i16).to_be_bytes()); // acks
    body.extend(5000i32.to_be_bytes()); // timeout
    body.extend(1i32.to_be_bytes());
    body.extend(string(topic));
    body.extend(1i32.to_be_bytes());
    body.extend(0i32.to_be_bytes()); // partition
    body.extend(0i32.to_be_bytes()); // records: zero bytes
    let mut stream = connect(port);
    stream.write_all(&frame(0, 8, 77, &body)).unwrap();
    let Outcome::Answered(77, response) = read_response(&mut stream) else {
        panic!("no answer to a Produce v8");
    };
    let mut c = Cursor(&response);
    assert_eq!(c.i32(), 1, "topics in the Produce answer");
    assert_eq!(c.nullable_string().as_deref(), Some(topic));
    assert_eq!(c.i32(), 1, "partitions in the Produce answer");
    assert_eq!(c.i32(), 0, "partition index");
    let code = c.i16();
    let (_base_offset, _append_time, _log_start) = (c.i64(), c.i64(), c.i64());
    let record_errors = c.i32();
    for _ in 0..record_errors.max(0) {
        c.i32();
        c.nullable_string();
    }
    (code, c.nullable_string())
}

/// ListOffsets v7 (flexible) of `timestamp` (-1 latest, -2 earliest, -3 the max timestamp) for every partition of
/// `topic`, read_uncommitted, on a raw connection: per partition, (error code, partition, timestamp, offset).
pub fn list_offsets(port: u16, topic: &str, partitions: i32, timestamp: i64) -> Vec<(i16, i32, i64, i64)> {
    let mut body = Vec::new();
    body.extend((-1i32).to_be_bytes()); // replica id: a consumer
    body.push(0); // read_uncommitted
    uvarint(2, &mut body); // one topic
    uvarint(topic.len() as u32 + 1, &mut body);
    body.extend(topic.as_bytes());
    uvarint(partitions as u32 + 1, &mut body);
    for p in 0..partitions {
        body.extend(p.to_be_bytes());
        body.extend((-1i32).to_be_bytes()); // current leader epoch
        body.extend(timestamp.to_be_bytes());
        body.push(0);
    }
    body.push(0); // the topic's tagged fields
    body.push(0); // the body's
    let mut stream = connect(port);
    stream.write_all(&flexible_frame(2, 7, 2, &body)).unwrap();
    let Outcome::Answered(2, response) = read_response(&mut stream) else {
        panic!("no answer to a ListOffsets v7");
    };
    let mut c = Cursor(&response);
    c.no_tagged_fields(); // response header v1
    c.i32(); // throttle time
    assert_eq!(c.uvarint(), 2, "topics in the ListOffsets answer");
    assert_eq!(c.compact_string(), topic);
    let n = c.uvarint().saturating_sub(1);
    let mut out: Vec<(i16, i32, i64, i64)> = (0..n)
        .map(|_| {
            let (partition, code, timestamp, offset, _epoch) = (c.i32(), c.i16(), c.i64(), c.i64(), c.i32());
            c.no_tagged_fields();
            (code, partition, timestamp, offset)
        })
        .collect();
    out.sort_by_key(|e| e.1);
    out
}

/// OffsetForLeaderEpoch v3 of `epoch` for every partition of `topic` on a raw connection: per partition, (error
/// code, partition, leader epoch, end offset).
pub fn offset_for_leader_epoch(port: u16, topic: &str, partitions: i32, epoch: i32) -> Vec<(i16, i32, i32, i64)> {
    let mut body = Vec::new();
    body.extend((-1i32).to_be_bytes()); // replica id: a consumer
    body.extend(1i32.to_be_bytes());
    body.extend(string(topic));
    body.extend(partitions.to_be_bytes());
    for p in 0..partitions {
        body.extend(p.to_be_bytes());
        body.extend((-1i32).to_be_bytes()); // current leader epoch: unknown, no fencing
        body.extend(epoch.to_be_bytes());
    }
    let mut stream = connect(port);
    stream.write_all(&frame(23, 3, 23, &body)).unwrap();
    let Outcome::Answered(23, response) = read_response(&mut stream) else {
        panic!("no answer to an OffsetForLeaderEpoch v3");
    };
    let mut c = Cursor(&response);
    c.i32(); // throttle time
    assert_eq!(c.i32(), 1, "topics in the OffsetForLeaderEpoch answer");
    assert_eq!(c.nullable_string().as_deref(), Some(topic));
    let n = c.i32();
    let mut out: Vec<(i16, i32, i32, i64)> = (0..n).map(|_| (c.i16(), c.i32(), c.i32(), c.i64())).collect();
    out.sort_by_key(|e| e.1);
    out
}

/// A Fetch v4 of partition 0 of `topic` from offset 0 (no wait, `max_bytes` for the response and the partition)
/// sent on a new connection whose answer is never read: a client that stops reading mid-response.
pub fn stalled_fetch(port: u16, topic: &str, max_bytes: i32) -> TcpStream {
    let mut body = Vec::new();
    body.extend((-1i32).to_be_bytes()); // replica id: a consumer
    body.extend(0i32.to_be_bytes()); // max wait
    body.extend(0i32.to_be_bytes()); // min bytes
    body.extend(max_bytes.to_be_bytes());
    body.push(0); // read_uncommitted
    body.extend(1i32.to_be_bytes());
    body.extend(string(topic));
    body.extend(1i32.to_be_bytes());
    body.extend(0i32.to_be_bytes()); // partition
    body.extend(0i64.to_be_bytes()); // fetch offset
    body.extend(max_bytes.to_be_bytes()); // partition max bytes
    let mut stream = connect(port);
    stream.write_all(&frame(1, 4, 99, &body)).unwrap();
    stream
}
