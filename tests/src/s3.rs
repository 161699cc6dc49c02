//! A throwaway S3-compatible server for tests: moto's `moto_server` (PyPI `moto[server]`, installed by
//! `scripts/install-test-deps.sh`) on a free loopback port, with one bucket created.
//!
//! Why moto: it is a pip install (no Docker, no binary download), speaks enough S3 for object_store's client —
//! signed requests, multipart uploads, listing, and `If-None-Match: *` conditional puts — and keeps everything in
//! memory, so each test gets a clean server. The server is a child process, killed when the [`MotoServer`] is
//! dropped; its output goes to a log file whose tail is included in start-up errors.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::ports::free_port;
use crate::wait::wait_for;

/// Credentials moto accepts (it checks signatures' form, not their secret).
pub const ACCESS_KEY_ID: &str = "testing";
pub const SECRET_ACCESS_KEY: &str = "testing";
pub const REGION: &str = "us-east-1";
/// The bucket every server starts with.
pub const BUCKET: &str = "segmirror-test";
/// How long moto may take to start (it imports a lot of Python on first use).
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running `moto_server` with [`BUCKET`] created.
pub struct MotoServer {
    child: Option<Child>,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl MotoServer {
    /// Starts the server and creates the bucket. Fails with a message naming the installer if `moto_server` is
    /// not on `PATH`.
    pub fn start() -> Result<MotoServer> {
        let dir = tempfile::Builder::new()
            .prefix("moto-")
            .tempdir()
            .context("temp dir for moto's log")?;
        let log = dir.path().join("moto.log");
        let out = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone().context("duplicating the log handle")?;
        let port = free_port()?;
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err))
            .spawn()
            .context(
                "starting moto_server (PyPI moto[server]); run `scripts/test-all.sh` or `scripts/install-test-deps.sh`",
            )?;
        let mut server = MotoServer {
            child: Some(child),
            port,
            log,
            _dir: dir,
        };
        let ready = wait_for(
            "moto_server to answer",
            START_TIMEOUT,
            Duration::from_millis(200),
            || {
                if let Some(child) = server.child.as_mut() {
                    if let Some(status) = child.try_wait().context("polling moto_server")? {
                        bail!("moto_server exited with {status}");
                    }
                }
                Ok(server.request("GET", "/").ok().filter(|s| *s == 200).map(|_| ()))
            },
        );
        if let Err(e) = ready {
            bail!("{e:#}\nmoto_server log tail:\n{}", server.log_tail());
        }
        let status = server.request("PUT", &format!("/{BUCKET}"))?;
        if status != 200 {
            bail!("creating bucket {BUCKET} answered HTTP {status}\n{}", server.log_tail());
        }
        Ok(server)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `s3://<bucket>/<prefix>` (or `s3://<bucket>` for an empty prefix).
    pub fn store_url(&self, prefix: &str) -> String {
        let prefix = prefix.trim_matches('/');
        if prefix.is_empty() {
            format!("s3://{BUCKET}")
        } else {
            format!("s3://{BUCKET}/{prefix}")
        }
    }

    /// The `AWS_*` variables a child process (e.g. the `segmirror` binary) needs to reach this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY_ID.to_string()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_ACCESS_KEY.to_string()),
            ("AWS_REGION", REGION.to_string()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
        ]
    }

    /// Store an empty object at `raw_path` (already percent-encoded as it goes on the wire, e.g. `east/%2E%2E/x`)
    /// with one unsigned request, bypassing every client's key rules: how a test plants keys no S3 client library
    /// would write (`..`, `.`, empty components). moto stores such keys even when it answers 403; the key's
    /// presence is what a test checks, through a listing.
    pub fn put_raw_key(&self, raw_path: &str) -> Result<u16> {
        self.request("PUT", &format!("/{BUCKET}/{raw_path}"))
    }

    /// The last lines of the server's output.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// One unsigned HTTP/1.1 request with an empty body; returns the status code. moto accepts unsigned requests
    /// for bucket administration.
    fn request(&self, method: &str, path: &str) -> Result<u16> {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).context("connecting to moto")?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )?;
        let mut head = [0u8; 64];
        let n = stream.read(&mut head).context("reading moto's answer")?;
        let text = String::from_utf8_lossy(&head[..n]);
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("not an HTTP answer: {text:?}"))?;
        Ok(status)
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
