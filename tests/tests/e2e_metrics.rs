//! The metrics endpoint and the admin API of the long-running services against a live broker (every
//! figure on `/metrics` for each service, and the link pause/resume of the admin API): `segmirror ship --connect` and
//! `segmirror apply --listen`, each with `--metrics-addr`, scraped as Prometheus would.
//!
//! One broker, one run, in order: the lag reaches zero when the mirror catches up (both sides, and the applier's
//! figures equal `segmirror status --json`'s); with the applier SIGKILLed the shipper's lag rises (offsets and
//! seconds) while records are produced, and falls to zero again once the applier is back; paused through the
//! admin API, the applier installs nothing (its installed offset and the mirror's bytes stay put while the source
//! grows, the catalog says `paused`), and resumed it catches up; the API's errors are JSON with 404/405/409.

use std::time::{Duration, Instant};

use segmirror_tests::clients::{admin, kcat_produce};
use segmirror_tests::http::{partition_key, request, scrape};
use segmirror_tests::ports::free_port;
use segmirror_tests::segmirror_cli::run_segmirror;
use segmirror_tests::service::{follow_args, Service};
use segmirror_tests::{BrokerConfig, KafkaBroker, TopicSpec};

/// Guard against hangs, not a speed assertion.
const PATIENCE: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(200);
const LINK: &str = "dr";
const TOPIC: &str = "orders";

fn produce(bootstrap: &str, tag: &str, n: usize) {
    let values: Vec<String> = (0..n).map(|i| format!("{tag}-{i}")).collect();
    let records: Vec<(Option<&str>, Option<&str>)> = values.iter().map(|v| (None, Some(v.as_str()))).collect();
    kcat_produce(bootstrap, TOPIC, 0, &records, &[]).unwrap();
}

/// A partition figure of the last scrape, by metric name.
type Figure<'a> = &'a dyn Fn(&str) -> Option<f64>;

fn figure(addr: &str, name: &str) -> Option<f64> {
    figure_of(addr, LINK, name)
}

fn figure_of(addr: &str, link: &str, name: &str) -> Option<f64> {
    scrape(addr).unwrap().get(&partition_key(name, link, TOPIC, 0)).copied()
}

/// Waits until `check` holds for `addr`'s scrape; the services must keep running meanwhile.
fn wait_until(what: &str, addr: &str, services: &mut [&mut Service], check: impl Fn(Figure<'_>) -> bool) {
    wait_until_of(what, addr, LINK, services, check)
}

/// [`wait_until`] for the figures of `link`.
fn wait_until_of(
    what: &str,
    addr: &str,
    link: &str,
    services: &mut [&mut Service],
    check: impl Fn(Figure<'_>) -> bool,
) {
    let start = Instant::now();
    loop {
        let samples = scrape(addr).unwrap();
        let get = |name: &str| samples.get(&partition_key(name, link, TOPIC, 0)).copied();
        if check(&get) {
            return;
        }
        for s in services.iter_mut() {
            s.assert_running();
        }
        assert!(
            start.elapsed() < PATIENCE,
            "never {what}; last scrape of {addr}:\n{samples:#?}\n{}",
            services.iter().map(|s| s.log()).collect::<Vec<_>>().join("\n----\n")
        );
        std::thread::sleep(POLL);
    }
}

fn caught_up_at(end: f64) -> impl Fn(Figure<'_>) -> bool {
    move |get| {
        get("segmirror_partition_lag_offsets") == Some(0.0)
            && get("segmirror_partition_source_log_end_offset") == Some(end)
    }
}

#[test]
fn lag_metrics_follow_the_mirror_and_the_admin_api_pauses_and_resumes_the_applier() {
    let broker = KafkaBroker::start(
        // The shipper's high watermark (its scrape-time source end) is read from the broker's checkpoint file.
        BrokerConfig::new("e2e-metrics").property("replica.high.watermark.checkpoint.interval.ms", 500),
    )
    .unwrap();
    let bootstrap = broker.bootstrap();
    admin(&bootstrap, &[TopicSpec::new(TOPIC, 1)], &[]).unwrap();
    produce(&bootstrap, "a", 200);

    let mirror = tempfile::tempdir().unwrap();
    let mirror_root = mirror.path().to_str().unwrap().to_string();
    let link_addr = format!("127.0.0.1:{}", free_port().unwrap());
    let apply_metrics = format!("127.0.0.1:{}", free_port().unwrap());
    let ship_metrics = format!("127.0.0.1:{}", free_port().unwrap());
    let mut applier = Service::start(
        "apply",
        [
            "apply",
            "--listen",
            &link_addr,
            "--mirror",
            &mirror_root,
            "--link",
            LINK,
            "--plaintext",
            "--metrics-addr",
            &apply_metrics,
        ],
    )
    .patience(PATIENCE);
    applier.wait_for("listening on ");
    let log_dir = broker.log_dir().to_str().unwrap().to_string();
    let mut shipper = Service::start(
        "ship",
        [
            "ship",
            "--log-dir",
            &log_dir,
            "--link",
            LINK,
            "--plaintext",
            "--connect",
            &link_addr,
            "--upto",
            "log-end",
            "--metrics-addr",
            &ship_metrics,
        ],
    )
    .patience(PATIENCE);
    shipper.wait_for("metrics and admin API on ");

    // 1. Caught up: lag zero on both sides.
    wait_until(
        "caught up at 200 (applier)",
        &apply_metrics,
        &mut [&mut applier, &mut shipper],
        |get| caught_up_at(200.0)(get) && get("segmirror_partition_installed_offset") == Some(200.0),
    );
    wait_until(
        "caught up at 200 (shipper)",
        &ship_metrics,
        &mut [&mut applier, &mut shipper],
        |get| caught_up_at(200.0)(get) && get("segmirror_partition_shipped_offset") == Some(200.0),
    );
    let samples = scrape(&apply_metrics).unwrap();
    assert!(
        samples[&partition_key("segmirror_partition_installed_bytes_total", LINK, TOPIC, 0)] > 0.0,
        "{samples:#?}"
    );
    assert_eq!(
        samples[&format!("segmirror_link_state{{link=\"{LINK}\",state=\"active\"}}")],
        1.0
    );
    assert_eq!(samples[&format!("segmirror_link_connected{{link=\"{LINK}\"}}")], 1.0);
    assert_eq!(
        samples[&format!(
            "segmirror_partition_state{{link=\"{LINK}\",topic=\"{TOPIC}\",partition=\"0\",state=\"caught_up\"}}"
        )],
        1.0
    );
    // `status` shows the same figures: both are read with the same code from the same files.
    let status = run_segmirror(["status", "--mirror", &mirror_root, "--json"])
        .unwrap()
        .json()
        .unwrap();
    let tail = &status["tail"][0];
    assert_eq!(
        (tail["topic"].as_str(), tail["installed_end_offset"].as_i64()),
        (Some(TOPIC), Some(200)),
        "{status}"
    );
    assert_eq!(tail["lag_offsets"].as_i64(), Some(0));

    // 2. The applier stopped: the shipper's lag rises while records are produced.
    applier.kill();
    produce(&bootstrap, "b", 100);
    wait_until(
        "behind by 100 with the applier down (shipper)",
        &ship_metrics,
        &mut [&mut shipper],
        |get| {
            get("segmirror_partition_lag_offsets") == Some(100.0)
                && get("segmirror_partition_high_watermark") == Some(300.0)
        },
    );
    wait_until(
        "behind for a second or more (shipper)",
        &ship_metrics,
        &mut [&mut shipper],
        |get| {
            get("segmirror_partition_lag_seconds").is_some_and(|s| s >= 1.0)
                && get("segmirror_partition_lag_offsets") == Some(100.0)
        },
    );
    let errors_before = scrape(&ship_metrics).unwrap()[&format!("segmirror_link_errors_total{{link=\"{LINK}\"}}")];
    applier.restart();
    applier.wait_for("metrics and admin API on ");
    wait_until(
        "caught up at 300 (applier)",
        &apply_metrics,
        &mut [&mut applier, &mut shipper],
        |get| caught_up_at(300.0)(get) && get("segmirror_partition_installed_offset") == Some(300.0),
    );
    wait_until(
        "caught up at 300 (shipper)",
        &ship_metrics,
        &mut [&mut applier, &mut shipper],
        |get| caught_up_at(300.0)(get) && get("segmirror_partition_lag_seconds") == Some(0.0),
    );
    let ship_samples = scrape(&ship_metrics).unwrap();
    assert!(
        ship_samples[&format!("segmirror_link_errors_total{{link=\"{LINK}\"}}")] >= errors_before
            && ship_samples[&format!("segmirror_link_sessions_total{{link=\"{LINK}\"}}")] >= 2.0,
        "the lost session and the reconnect are counted: {ship_samples:#?}"
    );

    // 3. Paused through the admin API: nothing is installed while the source grows.
    let (code, body) = request(&apply_metrics, "POST", &format!("/v1/links/{LINK}/pause"), "").unwrap();
    assert_eq!(code, 200, "{body}");
    let view: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (view["state"].as_str(), view["served"].as_bool()),
        (Some("paused"), Some(true)),
        "{body}"
    );
    applier.wait_for("is paused");
    let log = mirror
        .path()
        .join(format!("{TOPIC}-0"))
        .join("00000000000000000000.log");
    let size_paused = std::fs::metadata(&log).unwrap().len();
    produce(&bootstrap, "c", 100);
    wait_until(
        "behind by 100 while paused (shipper)",
        &ship_metrics,
        &mut [&mut applier, &mut shipper],
        |get| get("segmirror_partition_lag_offsets") == Some(100.0),
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        figure(&apply_metrics, "segmirror_partition_installed_offset"),
        Some(300.0)
    );
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        size_paused,
        "the paused mirror grew"
    );
    let samples = scrape(&apply_metrics).unwrap();
    assert_eq!(
        samples[&format!("segmirror_link_state{{link=\"{LINK}\",state=\"paused\"}}")],
        1.0,
        "{samples:#?}"
    );
    let status = run_segmirror(["status", "--mirror", &mirror_root, "--json"])
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(status["links"][0]["state"].as_str(), Some("paused"), "{status}");
    let (code, body) = request(&apply_metrics, "GET", "/v1/links", "").unwrap();
    assert_eq!(code, 200);
    assert!(body.contains("\"paused\""), "{body}");

    // The API's refusals.
    let (code, body) = request(&apply_metrics, "POST", "/v1/links/nope/pause", "").unwrap();
    assert_eq!(code, 404, "{body}");
    assert!(serde_json::from_str::<serde_json::Value>(&body).unwrap()["error"]
        .as_str()
        .unwrap()
        .contains("nope"));
    assert_eq!(
        request(&apply_metrics, "GET", &format!("/v1/links/{LINK}/resume"), "")
            .unwrap()
            .0,
        405
    );
    let (code, body) = request(
        &apply_metrics,
        "PUT",
        &format!("/v1/links/{LINK}/topics-regex"),
        r#"{"topics_regex": "orders|payments"}"#,
    )
    .unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("orders|payments"), "{body}");
    assert_eq!(
        request(
            &apply_metrics,
            "PUT",
            &format!("/v1/links/{LINK}/topics-regex"),
            r#"{"topics_regex": "("}"#
        )
        .unwrap()
        .0,
        400
    );
    assert_eq!(
        request(
            &ship_metrics,
            "PUT",
            &format!("/v1/links/{LINK}/topics-regex"),
            r#"{"topics_regex": "x"}"#
        )
        .unwrap()
        .0,
        409
    );

    // 4. Resumed: it catches up.
    let (code, body) = request(&apply_metrics, "POST", &format!("/v1/links/{LINK}/resume"), "").unwrap();
    assert_eq!(code, 200, "{body}");
    wait_until(
        "caught up at 400 after resume (applier)",
        &apply_metrics,
        &mut [&mut applier, &mut shipper],
        |get| caught_up_at(400.0)(get) && get("segmirror_partition_installed_offset") == Some(400.0),
    );
    wait_until(
        "caught up at 400 after resume (shipper)",
        &ship_metrics,
        &mut [&mut applier, &mut shipper],
        caught_up_at(400.0),
    );

    let (ship_code, ship_log) = shipper.stop();
    let (apply_code, apply_log) = applier.stop();
    assert_eq!(ship_code, Some(0), "{ship_log}");
    assert_eq!(apply_code, Some(0), "{apply_log}");

    // 5. The bucket paths, on the same broker: `ship --store` and `apply --follow` count what their rounds move,
    // and a follower paused through the admin API installs nothing until resumed.
    let bucket_link = "bk";
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    std::fs::create_dir_all(&store).unwrap();
    let store_url = store.to_str().unwrap().to_string();
    let store_ship_metrics = format!("127.0.0.1:{}", free_port().unwrap());
    let follow_metrics = format!("127.0.0.1:{}", free_port().unwrap());
    let mut store_shipper = Service::start(
        "ship --store",
        [
            "ship",
            "--store",
            &store_url,
            "--log-dir",
            &log_dir,
            "--link",
            bucket_link,
            "--upto",
            "log-end",
            "--upload-interval-ms",
            "200",
            "--metrics-addr",
            &store_ship_metrics,
        ],
    )
    .patience(PATIENCE);
    store_shipper.wait_for("metrics and admin API on ");
    wait_until_of(
        "shipped 400 to the bucket",
        &store_ship_metrics,
        bucket_link,
        &mut [&mut store_shipper],
        |get| {
            get("segmirror_partition_shipped_offset") == Some(400.0)
                && get("segmirror_partition_shipped_bytes_total").is_some_and(|b| b > 0.0)
        },
    );
    let follow_mirror = work.path().join("mirror");
    let follow_catalog = work.path().join("catalog.sqlite");
    let mut follower = Service::start(
        "apply --follow",
        follow_args(&store_url, &follow_mirror, &follow_catalog, bucket_link)
            .into_iter()
            .chain(["--metrics-addr".to_string(), follow_metrics.clone()]),
    )
    .patience(PATIENCE);
    follower.wait_for("metrics and admin API on ");
    let installed = |addr: &str| figure_of(addr, bucket_link, "segmirror_partition_installed_offset");
    wait_until_of(
        "followed to 400",
        &follow_metrics,
        bucket_link,
        &mut [&mut store_shipper, &mut follower],
        |get| {
            get("segmirror_partition_installed_offset") == Some(400.0)
                && get("segmirror_partition_installed_bytes_total").is_some_and(|b| b > 0.0)
                // The bucket's newest version is the follower's source side: caught up.
                && get("segmirror_partition_shipped_offset") == Some(400.0)
                && get("segmirror_partition_lag_offsets") == Some(0.0)
                && get("segmirror_partition_lag_seconds") == Some(0.0)
        },
    );
    let (code, body) = request(&follow_metrics, "POST", &format!("/v1/links/{bucket_link}/pause"), "").unwrap();
    assert_eq!(code, 200, "{body}");
    produce(&bootstrap, "d", 100);
    wait_until_of(
        "shipped 500 to the bucket",
        &store_ship_metrics,
        bucket_link,
        &mut [&mut store_shipper],
        |get| get("segmirror_partition_shipped_offset") == Some(500.0),
    );
    // The version waits in the bucket: the follower's lag shows it.
    wait_until_of(
        "a bucket lag of 100 while paused",
        &follow_metrics,
        bucket_link,
        &mut [&mut store_shipper, &mut follower],
        |get| {
            get("segmirror_partition_shipped_offset") == Some(500.0)
                && get("segmirror_partition_lag_offsets") == Some(100.0)
                && get("segmirror_partition_lag_seconds").is_some()
        },
    );
    assert_eq!(installed(&follow_metrics), Some(400.0), "a paused follower installed");
    let samples = scrape(&follow_metrics).unwrap();
    assert_eq!(
        samples[&format!("segmirror_link_state{{link=\"{bucket_link}\",state=\"paused\"}}")],
        1.0
    );
    // ship --store has no pause yet: it says so.
    assert_eq!(
        request(
            &store_ship_metrics,
            "POST",
            &format!("/v1/links/{bucket_link}/pause"),
            ""
        )
        .unwrap()
        .0,
        409
    );
    let (code, body) = request(&follow_metrics, "POST", &format!("/v1/links/{bucket_link}/resume"), "").unwrap();
    assert_eq!(code, 200, "{body}");
    wait_until_of(
        "followed to 500 after resume",
        &follow_metrics,
        bucket_link,
        &mut [&mut store_shipper, &mut follower],
        |get| {
            get("segmirror_partition_installed_offset") == Some(500.0)
                && get("segmirror_partition_lag_offsets") == Some(0.0)
                && get("segmirror_partition_lag_seconds") == Some(0.0)
        },
    );
    let (code, log) = follower.stop();
    assert_eq!(code, Some(0), "{log}");
    let (code, log) = store_shipper.stop();
    assert_eq!(code, Some(0), "{log}");
}
