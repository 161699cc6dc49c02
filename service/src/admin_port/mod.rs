//! The HTTP side of the long-running processes (`segmirror ship`, `segmirror apply --listen|--connect`, and the
//! bucket paths `ship --store` and `apply --follow`):
//! `--metrics-addr HOST:PORT` serves `GET /metrics` (Prometheus text format) and the admin API under `/v1/links`
//! (JSON; documented in `docs/openapi.yaml`, which a test keeps equal to [`ROUTES`]).
//!
//! Why one server for both: an operator opens one port per process and finds both the figures and the controls
//! there. Why off the data path: the scrape reads what the loops already keep (see `figures`) or the mirror's files
//! on a blocking thread; an admin call is a short catalog transaction on a blocking thread. Nothing here can slow
//! a session beyond the observers' few field updates.
//!
//! Why one blocking call at a time ([`BLOCKING_CALLS`]): each opens the catalog (SQLite). Left unbounded, a storm
//! of clients made as many blocking threads and catalog connections at once, and SQLite cannot close a
//! connection's descriptor while another connection of the process (the applier's own) holds a lock on the file
//! (POSIX locks belong to the process, and closing any descriptor of the file drops them all): it keeps each one
//! for reuse, so 200 clients at once left 200 descriptors open for good. One at a time, the port costs the
//! process one catalog descriptor, reused; the HTTP side has its own bounds (`http`).

pub mod admin;
pub mod exposition;
pub mod figures;
pub mod http;

use std::sync::Arc;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use admin::{AdminError, LinkAdmin};
use figures::Snapshot;
use http::{Handler, Request, Response};

/// Every route served: (method, path template). `docs/openapi.yaml` lists exactly these (a test).
pub const ROUTES: &[(&str, &str)] = &[
    ("GET", "/metrics"),
    ("GET", "/v1/links"),
    ("GET", "/v1/links/{name}"),
    ("POST", "/v1/links/{name}/pause"),
    ("POST", "/v1/links/{name}/resume"),
    ("PUT", "/v1/links/{name}/topics-regex"),
];

/// Blocking calls (a scrape, an admin call) running at once in this process.
pub const BLOCKING_CALLS: usize = 1;
/// How long a request waits for its turn before it is answered 503.
pub const BLOCKING_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

static BLOCKING: Semaphore = Semaphore::const_new(BLOCKING_CALLS);

/// Runs `call` on a blocking thread when its turn comes (see the module's doc); `Err(response)` when it did not
/// come within [`BLOCKING_WAIT`] or the call panicked. The turn is held by the blocking thread itself, so a client
/// that goes away mid-call does not let the next call start beside it.
async fn blocking<T: Send + 'static>(call: impl FnOnce() -> T + Send + 'static) -> Result<T, Response> {
    let turn = match tokio::time::timeout(BLOCKING_WAIT, BLOCKING.acquire()).await {
        Ok(Ok(turn)) => turn,
        Ok(Err(_)) | Err(_) => {
            return Err(Response::error(
                503,
                "busy: earlier requests are still being answered; try again shortly",
            ))
        }
    };
    tokio::task::spawn_blocking(move || {
        let answer = call();
        drop(turn);
        answer
    })
    .await
    .map_err(|e| Response::error(500, format!("the call failed: {e}")))
}

/// Takes the figures for one scrape; runs on a blocking thread.
pub type SnapshotFn = dyn Fn() -> Snapshot + Send + Sync;

/// The routes over a snapshot source and a link admin.
pub struct App {
    pub snapshot: Arc<SnapshotFn>,
    pub admin: Arc<dyn LinkAdmin>,
}

/// Body of `PUT /v1/links/{name}/topics-regex`.
#[derive(serde::Deserialize)]
struct TopicsRegexBody {
    topics_regex: String,
}

impl App {
    /// Runs `op` on a blocking thread (the catalog is SQLite) and answers its view as JSON.
    async fn admin<T: serde::Serialize + Send + 'static>(
        &self,
        op: impl FnOnce(&dyn LinkAdmin) -> Result<T, AdminError> + Send + 'static,
    ) -> Response {
        let admin = self.admin.clone();
        match blocking(move || op(admin.as_ref())).await {
            Ok(Ok(view)) => Response::json(200, &serde_json::to_value(view).unwrap_or_default()),
            Ok(Err(e)) => Response::error(e.status, e.message),
            Err(refusal) => refusal,
        }
    }
}

/// A route template's match: `Some(name)` for `{name}` templates, `Some("")` for fixed ones.
fn matches(template: &str, path: &str) -> Option<String> {
    let t: Vec<&str> = template.split('/').collect();
    let p: Vec<&str> = path.split('/').collect();
    if t.len() != p.len() {
        return None;
    }
    let mut name = String::new();
    for (t, p) in t.iter().zip(&p) {
        if *t == "{name}" {
            if p.is_empty() {
                return None;
            }
            name = percent_decode(p)?;
        } else if t != p {
            return None;
        }
    }
    Some(name)
}

/// `%XX` sequences decoded (a link name with unusual characters); `None` when malformed.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

impl Handler for App {
    async fn handle(&self, request: Request) -> Response {
        let Some((method, template, name)) = ROUTES
            .iter()
            .find_map(|(m, t)| matches(t, &request.path).map(|name| (*m, *t, name)))
        else {
            return Response::error(404, format!("no route {}", request.path));
        };
        if !ROUTES.iter().any(|(m, t)| *t == template && *m == request.method) {
            return Response::error(405, format!("{} {}: use {method}", request.method, request.path));
        }
        match template {
            "/metrics" => {
                let snapshot = self.snapshot.clone();
                match blocking(move || exposition::render(&snapshot())).await {
                    Ok(text) => Response {
                        status: 200,
                        content_type: exposition::CONTENT_TYPE,
                        body: text.into_bytes(),
                    },
                    Err(refusal) => refusal,
                }
            }
            "/v1/links" => self.admin(|a| a.links()).await,
            "/v1/links/{name}" => self.admin(move |a| a.link(&name)).await,
            "/v1/links/{name}/pause" => self.admin(move |a| a.pause(&name)).await,
            "/v1/links/{name}/resume" => self.admin(move |a| a.resume(&name)).await,
            "/v1/links/{name}/topics-regex" => match serde_json::from_slice::<TopicsRegexBody>(&request.body) {
                Ok(body) => self.admin(move |a| a.set_topics_regex(&name, &body.topics_regex)).await,
                Err(e) => Response::error(400, format!("the body must be {{\"topics_regex\": \"REGEX\"}}: {e}")),
            },
            other => Response::error(500, format!("route {other} has no handler")),
        }
    }
}

/// Binds `addr` and serves `app` until `shutdown`; returns the bound address (printed: port 0 picks one).
pub async fn start(addr: &str, app: App, shutdown: CancellationToken) -> anyhow::Result<std::net::SocketAddr> {
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("--metrics-addr {addr}: listening"))?;
    let bound = listener.local_addr().context("the metrics address")?;
    eprintln!("segmirror: metrics and admin API on http://{bound}/metrics and http://{bound}/v1/links");
    tokio::spawn(http::serve(listener, Arc::new(app), shutdown));
    Ok(bound)
}

#[cfg(test)]
mod tests;
