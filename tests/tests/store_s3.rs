//! The transport conformance suite (`segmirror_shipper::conformance`) against S3.
//!
//! Always against a local `moto_server` (installed by `scripts/install-test-deps.sh`); in addition against a real
//! S3-compatible service when `SEGMIRROR_TEST_S3_ENDPOINT` is set (bucket `SEGMIRROR_TEST_S3_BUCKET`, default
//! `segmirror-test`, which must exist; credentials and region from the usual `AWS_*` variables). The suite covers
//! round trips, multipart uploads, verified downloads, listing, deletion, atomic create-if-absent under
//! contention, and lease fencing.

use segmirror_shipper::conformance;
use segmirror_shipper::store::{S3Options, Store, StoreUrl};
use segmirror_tests::s3::{MotoServer, ACCESS_KEY_ID, REGION, SECRET_ACCESS_KEY};

fn moto_store(server: &MotoServer, prefix: &str) -> Store {
    let url = StoreUrl::parse(&server.store_url(prefix)).unwrap();
    let options = S3Options {
        endpoint: Some(server.endpoint()),
        region: Some(REGION.into()),
        access_key_id: Some(ACCESS_KEY_ID.into()),
        secret_access_key: Some(SECRET_ACCESS_KEY.into()),
        session_token: None,
        allow_http: Some(true),
    };
    Store::open(&url, &options).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_store_conforms() {
    let server = MotoServer::start().unwrap();
    // Under a prefix, as an operator sharing a bucket would configure it.
    let store = moto_store(&server, "team/mirror");
    conformance::run_all(&store).await;
    // And at the bucket root.
    let root = moto_store(&server, "");
    conformance::small_objects(&root).await;
    conformance::listing(&root).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moto_fences_a_stale_lease_holder() {
    let server = MotoServer::start().unwrap();
    let store = moto_store(&server, "");
    // Create-if-absent is what fencing rests on: check it on its own first, so a server that ignores
    // `If-None-Match` fails here with a clear message rather than somewhere inside the lease test.
    conformance::put_if_absent(&store).await;
    conformance::lease_fencing(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_external_s3_service_conforms_when_configured() {
    let Ok(endpoint) = std::env::var("SEGMIRROR_TEST_S3_ENDPOINT") else {
        eprintln!("not run: set SEGMIRROR_TEST_S3_ENDPOINT (and AWS_* credentials) to test a real S3 service");
        return;
    };
    let bucket = std::env::var("SEGMIRROR_TEST_S3_BUCKET").unwrap_or_else(|_| "segmirror-test".into());
    let url = StoreUrl::parse(&format!("s3://{bucket}/segmirror-conformance")).unwrap();
    let options = S3Options {
        allow_http: Some(endpoint.starts_with("http://")),
        endpoint: Some(endpoint),
        ..Default::default()
    };
    let store = Store::open(&url, &options).unwrap();
    conformance::run_all(&store).await;
}
