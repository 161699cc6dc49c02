//! The routes against `docs/openapi.yaml`, and the handlers' answers over a fake admin.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use super::admin::{AdminError, LinkAdmin, LinkView};
use super::figures::Snapshot;
use super::http::{Handler, Request, Response};
use super::{App, ROUTES};

/// (METHOD, path) of every operation in the OpenAPI file: a path is a two-space-indented key under `paths:`, an
/// operation a four-space-indented HTTP method under it. Enough of YAML for the file as written; a test below
/// makes sure it found every route, so a reformatting that hides one fails rather than passes.
fn openapi_operations(text: &str) -> BTreeSet<(String, String)> {
    let mut ops = BTreeSet::new();
    let mut in_paths = false;
    let mut path: Option<String> = None;
    for line in text.lines() {
        if !line.starts_with(' ') && !line.is_empty() {
            in_paths = line.trim_end() == "paths:";
            path = None;
            continue;
        }
        if !in_paths {
            continue;
        }
        if let Some(key) = line.strip_prefix("  ").filter(|l| !l.starts_with(' ')) {
            path = Some(key.trim_end().trim_end_matches(':').to_string());
        } else if let (Some(p), Some(key)) = (&path, line.strip_prefix("    ").filter(|l| !l.starts_with(' '))) {
            let key = key.trim_end().trim_end_matches(':');
            if ["get", "put", "post", "delete", "patch"].contains(&key) {
                ops.insert((key.to_uppercase(), p.clone()));
            }
        }
    }
    ops
}

#[test]
fn the_openapi_file_lists_exactly_the_served_routes() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.yaml");
    let text = std::fs::read_to_string(file).unwrap();
    assert!(text.starts_with("openapi: 3.0"), "not an OpenAPI 3.0 document");
    let documented = openapi_operations(&text);
    let served: BTreeSet<(String, String)> = ROUTES.iter().map(|(m, p)| (m.to_string(), p.to_string())).collect();
    assert_eq!(documented, served, "docs/openapi.yaml and admin_port::ROUTES differ");
}

#[test]
fn the_openapi_reader_finds_operations_and_ignores_components() {
    let text = "openapi: 3.0.3\npaths:\n  /a:\n    parameters: []\n    get:\n      x: 1\n    put:\n  /b/{name}:\n    post:\ncomponents:\n  /c:\n    get:\n";
    let ops: Vec<_> = openapi_operations(text).into_iter().collect();
    assert_eq!(
        ops,
        [
            ("GET".to_string(), "/a".to_string()),
            ("POST".to_string(), "/b/{name}".to_string()),
            ("PUT".to_string(), "/a".to_string())
        ]
    );
}

/// Records every call; knows the link "dr" only.
#[derive(Default)]
struct FakeAdmin {
    calls: Mutex<Vec<String>>,
}

impl FakeAdmin {
    fn answer(&self, call: String, name: &str) -> Result<LinkView, AdminError> {
        self.calls.lock().unwrap().push(call);
        if name != "dr" {
            return Err(AdminError::new(404, format!("link {name:?} not found")));
        }
        Ok(LinkView {
            name: name.to_string(),
            state: "active".into(),
            role: "applier",
            topics_regex: None,
            groups_regex: None,
            served: true,
            connected: None,
            sessions: None,
            errors: None,
        })
    }
}

impl LinkAdmin for Arc<FakeAdmin> {
    fn links(&self) -> Result<Vec<LinkView>, AdminError> {
        Ok(vec![self.answer("links".into(), "dr")?])
    }
    fn link(&self, name: &str) -> Result<LinkView, AdminError> {
        self.answer(format!("link {name}"), name)
    }
    fn pause(&self, name: &str) -> Result<LinkView, AdminError> {
        self.answer(format!("pause {name}"), name)
    }
    fn resume(&self, name: &str) -> Result<LinkView, AdminError> {
        self.answer(format!("resume {name}"), name)
    }
    fn set_topics_regex(&self, name: &str, regex: &str) -> Result<LinkView, AdminError> {
        if regex.is_empty() {
            return Err(AdminError::new(409, "empty"));
        }
        self.answer(format!("topics {name} {regex}"), name)
    }
}

fn app() -> (App, Arc<FakeAdmin>) {
    let admin = Arc::new(FakeAdmin::default());
    let app = App {
        snapshot: Arc::new(Snapshot::default),
        admin: Arc::new(admin.clone()),
    };
    (app, admin)
}

async fn call(app: &App, method: &str, path: &str, body: &str) -> Response {
    app.handle(Request {
        method: method.into(),
        path: path.into(),
        body: body.as_bytes().to_vec(),
    })
    .await
}

fn json(r: &Response) -> serde_json::Value {
    serde_json::from_slice(&r.body).unwrap()
}

#[tokio::test]
async fn every_route_is_served_and_reaches_its_operation() {
    let (app, admin) = app();
    for (method, template) in ROUTES {
        let path = template.replace("{name}", "dr");
        let body = if *method == "PUT" {
            r#"{"topics_regex": "orders-.*"}"#
        } else {
            ""
        };
        let r = call(&app, method, &path, body).await;
        assert_eq!(r.status, 200, "{method} {path}: {}", String::from_utf8_lossy(&r.body));
    }
    assert_eq!(
        *admin.calls.lock().unwrap(),
        ["links", "link dr", "pause dr", "resume dr", "topics dr orders-.*"]
    );
    let metrics = call(&app, "GET", "/metrics", "").await;
    assert_eq!(metrics.content_type, "text/plain; version=0.0.4; charset=utf-8");
}

#[tokio::test]
async fn errors_are_json_with_the_right_status() {
    let (app, _) = app();
    let r = call(&app, "POST", "/v1/links/nope/pause", "").await;
    assert_eq!(
        (r.status, json(&r)["error"].as_str().unwrap()),
        (404, "link \"nope\" not found")
    );
    assert_eq!(call(&app, "GET", "/v1/links/dr/pause", "").await.status, 405);
    assert_eq!(call(&app, "DELETE", "/metrics", "").await.status, 405);
    assert_eq!(call(&app, "GET", "/v2/links", "").await.status, 404);
    assert_eq!(call(&app, "GET", "/v1/links//pause", "").await.status, 404);
    let bad = call(&app, "PUT", "/v1/links/dr/topics-regex", "orders").await;
    assert_eq!(bad.status, 400);
    assert!(json(&bad)["error"].as_str().unwrap().contains("topics_regex"));
    assert_eq!(
        call(&app, "PUT", "/v1/links/dr/topics-regex", r#"{"topics_regex": ""}"#)
            .await
            .status,
        409
    );
    // A percent-encoded name is decoded.
    let r = call(&app, "GET", "/v1/links/d%72", "").await;
    assert_eq!((r.status, json(&r)["name"].as_str().unwrap()), (200, "dr"));
}

// ---------------------------------------------------------------------------------------------------------------
// The port under hostile clients: real sockets against `http::serve_with` and the applier's catalog admin.
// ---------------------------------------------------------------------------------------------------------------

mod hostile {
    use std::net::SocketAddr;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use segmirror_catalog::{Catalog, LinkSpec};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio_util::sync::CancellationToken;

    use super::super::admin::CatalogAdmin;
    use super::super::figures::{LinkMeter, Snapshot};
    use super::super::http::{serve_with, Handler, Limits, Request, Response, MAX_BODY_BYTES, MAX_HEAD_BYTES};
    use super::super::App;

    /// Answers with the body's length.
    struct Length;
    impl Handler for Length {
        async fn handle(&self, r: Request) -> Response {
            Response {
                status: 200,
                content_type: "text/plain",
                body: r.body.len().to_string().into_bytes(),
            }
        }
    }

    async fn server<H: Handler>(handler: H, limits: Limits) -> (SocketAddr, CancellationToken) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        tokio::spawn(serve_with(listener, Arc::new(handler), stop.clone(), limits));
        (addr, stop)
    }

    /// Sends `raw` and reads the answer to the end; the whole exchange bounded by 10 s.
    async fn exchange(addr: SocketAddr, raw: &[u8]) -> String {
        tokio::time::timeout(Duration::from_secs(10), async {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(raw).await.unwrap();
            let mut out = Vec::new();
            // A refusal may reset the connection after its answer: what arrived is the answer.
            let _ = s.read_to_end(&mut out).await;
            String::from_utf8_lossy(&out).into_owned()
        })
        .await
        .expect("an answer within 10 s")
    }

    fn status(answer: &str) -> u16 {
        answer
            .strip_prefix("HTTP/1.1 ")
            .and_then(|a| a.get(..3))
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status line in {answer:?}"))
    }

    /// A request whose head is exactly `len` bytes, blank line included (padded by one header).
    fn head_of(len: usize) -> Vec<u8> {
        let fixed = "POST /x HTTP/1.1\r\nX-Pad: \r\n\r\n".len();
        let pad = "a".repeat(len - fixed);
        format!("POST /x HTTP/1.1\r\nX-Pad: {pad}\r\n\r\n").into_bytes()
    }

    #[tokio::test]
    async fn a_1_gib_body_claim_is_refused_413_without_reading_it_and_the_limits_are_exact() {
        let (addr, stop) = server(Length, Limits::default()).await;
        // The claim alone, no body sent: the answer comes at once (reading the body would wait out the timeout).
        let started = Instant::now();
        let claim = exchange(addr, b"PUT /x HTTP/1.1\r\nContent-Length: 1073741824\r\n\r\n").await;
        assert_eq!(status(&claim), 413, "{claim}");
        assert!(claim.contains("1073741824"), "{claim}");
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());

        // The head: exactly the limit is read, one byte more is refused (formerly up to 4 KiB more passed).
        assert_eq!(status(&exchange(addr, &head_of(MAX_HEAD_BYTES)).await), 200);
        assert_eq!(status(&exchange(addr, &head_of(MAX_HEAD_BYTES + 1)).await), 413);
        // A head just over the old check's reach with a body claim: refused, not read on without bound.
        let mut over = head_of(MAX_HEAD_BYTES + 4096);
        over.truncate(over.len() - 4);
        over.extend_from_slice(b"\r\nContent-Length: 1073741824\r\n\r\n");
        assert_eq!(status(&exchange(addr, &over).await), 413);

        // The body: exactly the limit is read whole, one byte more is refused.
        for (len, expected) in [(MAX_BODY_BYTES, 200), (MAX_BODY_BYTES + 1, 413)] {
            let mut raw = format!("PUT /x HTTP/1.1\r\nContent-Length: {len}\r\n\r\n").into_bytes();
            if expected == 200 {
                raw.resize(raw.len() + len, b'b');
            }
            let answer = exchange(addr, &raw).await;
            assert_eq!(status(&answer), expected, "{len}: {answer}");
            if expected == 200 {
                assert!(answer.ends_with(&format!("\r\n\r\n{len}")), "{answer}");
            }
        }
        stop.cancel();
    }

    #[tokio::test]
    async fn connections_over_the_cap_are_refused_at_once_and_idle_ones_time_out() {
        let limits = Limits {
            max_connections: 4,
            request_timeout: Duration::from_secs(3),
            ..Limits::default()
        };
        let (addr, stop) = server(Length, limits).await;
        // Four idle connections take every slot (given time to be accepted).
        let mut idle = Vec::new();
        for _ in 0..3 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut fourth = TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The fifth: answered 503 and closed at once, while the four still hold their slots.
        let started = Instant::now();
        let refused = exchange(addr, b"").await;
        assert_eq!(status(&refused), 503, "{refused}");
        // At once: a served client that sends nothing would wait out the request timeout.
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        // A slot given back serves the next client.
        fourth.write_all(b"GET /x HTTP/1.1\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        fourth.read_to_string(&mut answer).await.unwrap();
        assert_eq!(status(&answer), 200, "{answer}");
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(status(&exchange(addr, b"GET /x HTTP/1.1\r\n\r\n").await), 200);
        // The idle ones are answered 408 and closed within the request timeout.
        for mut s in idle {
            let mut out = String::new();
            tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out))
                .await
                .expect("closed within the request timeout")
                .unwrap();
            assert_eq!(status(&out), 408, "{out}");
        }
        stop.cancel();
    }

    /// The descriptors of this process open on files under `dir` (the catalog, its WAL and shared memory).
    fn fds_under(dir: &Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read_link(e.path()).ok())
            .filter(|target| target.starts_with(dir))
            .count()
    }

    fn catalog_app(dir: &Path) -> (App, PathBuf) {
        let path = dir.join("catalog.sqlite");
        let mut catalog = Catalog::open(&path).unwrap();
        catalog
            .create_link(&LinkSpec {
                name: "dr".into(),
                store_url: "direct:127.0.0.1:1".into(),
                topics_regex: "orders".into(),
                groups_regex: None,
            })
            .unwrap();
        let admin = CatalogAdmin {
            catalog_path: path.clone(),
            served: "dr".into(),
            gate: Arc::new(tokio::sync::watch::channel(false).0),
            meter: Arc::new(LinkMeter::default()),
            pausable: true,
        };
        // As the applier's scrape does: the catalog opened for each one.
        let scraped = path.clone();
        let snapshot = move || {
            Catalog::open(&scraped).and_then(|c| c.status()).unwrap();
            Snapshot::default()
        };
        let app = App {
            snapshot: Arc::new(snapshot),
            admin: Arc::new(admin),
        };
        (app, path)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_storm_of_clients_leaves_no_catalog_descriptor_behind() {
        let tmp = tempfile::tempdir().unwrap();
        let (app, path) = catalog_app(tmp.path());
        // The applier holds its own connection for the whole run (and reads through it, taking its lock).
        let held = Catalog::open(&path).unwrap();
        held.links().unwrap();
        let (addr, stop) = server(app, Limits::default()).await;
        for request in ["GET /metrics HTTP/1.1\r\n\r\n", "GET /v1/links HTTP/1.1\r\n\r\n"] {
            assert_eq!(status(&exchange(addr, request.as_bytes()).await), 200);
        }
        let baseline = fds_under(tmp.path());
        let mut clients = Vec::new();
        for i in 0..200 {
            let request = if i % 2 == 0 {
                "GET /metrics HTTP/1.1\r\n\r\n"
            } else {
                "POST /v1/links/dr/pause HTTP/1.1\r\n\r\n"
            };
            clients.push(tokio::spawn(exchange(addr, request.as_bytes())));
        }
        let mut served = 0;
        for c in clients {
            let answer = c.await.unwrap();
            match status(&answer) {
                200 => served += 1,
                503 => {}
                other => panic!("{other}: {answer}"),
            }
        }
        assert!(served > 0, "no client of the storm was served");
        assert_eq!(
            fds_under(tmp.path()),
            baseline,
            "catalog descriptors after the storm ({served} served)"
        );
        // Once more after it: still the same (nothing piles up over storms).
        for _ in 0..20 {
            exchange(addr, b"GET /metrics HTTP/1.1\r\n\r\n").await;
        }
        assert_eq!(fds_under(tmp.path()), baseline);
        drop(held);
        stop.cancel();
    }

    #[tokio::test]
    async fn put_topics_regex_refuses_what_link_alter_refuses() {
        let tmp = tempfile::tempdir().unwrap();
        let (app, path) = catalog_app(tmp.path());
        let put = |regex: &str| Request {
            method: "PUT".into(),
            path: "/v1/links/dr/topics-regex".into(),
            body: serde_json::to_vec(&serde_json::json!({ "topics_regex": regex })).unwrap(),
        };
        // A valid regex, but the list is split at commas first (as the shipper reads it): `orders-[0-9]{1` is not
        // a regex. `link alter --topics-regex` refuses it; so must the API, recording nothing.
        for refused in ["orders-[0-9]{1,3}", "orders,(payments"] {
            let r = app.handle(put(refused)).await;
            assert_eq!(r.status, 400, "{refused}: {}", String::from_utf8_lossy(&r.body));
            assert_eq!(Catalog::open(&path).unwrap().link("dr").unwrap().topics_regex, "orders");
        }
        let r = app.handle(put("orders-[0-9]+, payments")).await;
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(
            Catalog::open(&path).unwrap().link("dr").unwrap().topics_regex,
            "orders-[0-9]+, payments"
        );
    }
}
