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
    assert_eq!(documented, served, "docs/openapi.yaml and serve::ROUTES differ");
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
