//! `segmirror serve` against hostile and broken clients, end to end: the scene of `e2e_serve.rs` (a live Kafka 4.4
//! source, `ship --connect` into `apply --listen`, `serve` over the mirror), then clients no stock library would be.
//!
//! - Bad frames, absurd sizes, unknown API keys and versions, a thousand idle connections, fetches out of range,
//!   unknown topics: Kafka's answers or a closed connection; the endpoint keeps serving honest clients (one of them
//!   connected throughout), its memory and descriptors bounded.
//! - Clients that ask for a large Fetch answer and never read it neither starve an honest consumer nor grow the
//!   endpoint's memory past `--fetch-memory`.
//!
//! `SEGMIRROR_SERVE_REFERENCE=kafka` runs the same against the source broker itself (no memory bound for its JVM).

use std::collections::BTreeSet;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use segmirror_tests::serve::records::*;
use segmirror_tests::serve::wire::*;
use segmirror_tests::serve::*;
use segmirror_tests::*;
use serde_json::json;

/// The link the applier records and `serve` serves: distinctive, so a refusal that names it can be recognized.
const LINK: &str = "ro-mirror-link";

/// Per-reader patience for the first record and for the last.
const READ_PATIENCE: Duration = Duration::from_secs(120);

/// The endpoint's resident memory after the hostile clients, at most.
const RSS_LIMIT_KIB: u64 = 200 * 1024;

/// Idle connections held open at once.
const IDLE_CONNECTIONS: usize = 1000;

/// The endpoint answers an honest ApiVersions with Fetch, ListOffsets and Metadata among its APIs.
fn assert_serving(port: u16, serve: &mut Endpoint, after: &str) {
    serve.assert_running();
    let apis: BTreeSet<i16> = api_versions(port).into_iter().map(|(k, _, _)| k).collect();
    for key in [1, 2, 3, 18] {
        assert!(apis.contains(&key), "after {after}: API {key} not announced: {apis:?}");
    }
}

/// Hostile and broken clients, then an honest one: Kafka's error codes or a closed connection for the former, no
/// crash, bounded memory and descriptors, everything for the latter.
#[test]
fn hostile_clients_do_not_stop_the_endpoint() {
    ensure_fd_limit(IDLE_CONNECTIONS as u64 + 500).unwrap();
    let topic = "hostile";
    let partitions = 2;
    let mut repl = Replication::start("e2e-serve-hostile", LINK, &[topic_spec(topic, partitions)]);
    let source = repl.bootstrap();
    produce_round(&source, topic, partitions, 0);
    repl.wait_caught_up();
    let mut serve = repl.start_endpoint();
    let (endpoint, port) = (serve.bootstrap(), serve.port());
    // An honest reader, connected through everything that follows.
    let follower = python_follow(&endpoint, topic, Isolation::ReadUncommitted).unwrap();
    let first = consume_all(&source, topic, None, Isolation::ReadUncommitted).unwrap();
    let start = Instant::now();
    while ReaderKind::Python(Isolation::ReadUncommitted)
        .positions(&follower)
        .len()
        < first.len()
    {
        assert!(
            start.elapsed() < READ_PATIENCE,
            "the follower never read the mirror:\n{}",
            follower.stderr()
        );
        serve.assert_running();
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_serving(port, &mut serve, "start-up");
    let pid = serve.pid();
    let (rss_before, fds_before) = (vm_rss_kib(pid).unwrap(), open_fds(pid).unwrap());

    let unknown_key = frame(32000, 0, 1, &[]);
    // Metadata v1 claiming 2^31 - 16 topics, none sent; Fetch v4 of garbage.
    let huge_array = frame(3, 1, 2, &0x7fff_fff0i32.to_be_bytes());
    let garbage = frame(1, 4, 3, &[0xff; 64]);
    let mut truncated = frame(3, 1, 4, &[0; 80]);
    truncated.truncate(30);
    let mut two_gib = i32::MAX.to_be_bytes().to_vec();
    two_gib.extend(&frame(18, 0, 5, &[])[4..]);
    let mut negative = (-5i32).to_be_bytes().to_vec();
    negative.extend(&frame(18, 0, 6, &[])[4..]);
    let unsupported_metadata = frame(3, 999, 7, &[]);
    let cases: Vec<(&str, Vec<u8>, bool, i32)> = vec![
        ("an unknown API key", unknown_key, false, 1),
        ("an array of 2^31 topics", huge_array, false, 2),
        ("a garbage Fetch", garbage, false, 3),
        ("a truncated frame", truncated, true, 4),
        ("a frame declaring 2 GiB", two_gib, false, 5),
        ("a negative frame size", negative, false, 6),
        ("Metadata v999", unsupported_metadata, false, 7),
    ];
    for (what, bytes, half_close, correlation) in &cases {
        let outcome = send_hostile(port, bytes, *half_close);
        eprintln!(
            "{what}: {:?}",
            match &outcome {
                Outcome::Answered(c, body) => format!("answered (correlation {c}, {} bytes)", body.len()),
                other => format!("{other:?}"),
            }
        );
        match outcome {
            Outcome::Closed => {}
            Outcome::Answered(c, _) => {
                assert!(
                    !matches!(
                        *what,
                        "a truncated frame" | "a frame declaring 2 GiB" | "a negative frame size"
                    ),
                    "{what} was answered"
                );
                assert_eq!(c, *correlation, "{what}: an answer to another request");
            }
            Outcome::Hung => panic!("{what}: neither answered nor closed within {HOSTILE_PATIENCE:?}"),
        }
        assert_serving(port, &mut serve, what);
    }

    // An ApiVersions of a version the endpoint does not know: Kafka answers UNSUPPORTED_VERSION (35) in version 0,
    // so that the client retries with one it knows. Header v2 and a v3-style body, as a newer client sends.
    let body = [0u8, 0x02, b'x', 0x02, b'1', 0x00];
    match send_hostile(port, &frame(18, 127, 8, &body), false) {
        Outcome::Answered(8, body) => {
            let error = i16::from_be_bytes([body[0], body[1]]);
            assert_eq!(
                error, 35,
                "ApiVersions v127 answered error {error}, not UNSUPPORTED_VERSION"
            );
        }
        other => panic!("ApiVersions v127: {other:?}, not an UNSUPPORTED_VERSION answer"),
    }
    assert_serving(port, &mut serve, "ApiVersions v127");

    // Out of range and unknown: Kafka's error codes as the client reports them.
    let probe = python_call(
        "probe",
        &json!({"bootstrap": endpoint, "topic": topic, "unknown_topic": "no-such-topic", "partition": 0,
                "offset": 1_000_000_000i64}),
        READ_PATIENCE,
    )
    .unwrap();
    eprintln!("probe: {probe}");
    assert_eq!(probe["unknown_topic"]["code"], 3, "UNKNOWN_TOPIC_OR_PARTITION: {probe}");
    let out_of_range = &probe["out_of_range"];
    assert!(
        out_of_range["code"] == 1
            || out_of_range["str"]
                .as_str()
                .is_some_and(|s| s.to_lowercase().contains("offset out of range")),
        "OFFSET_OUT_OF_RANGE: {probe}"
    );

    // A thousand idle connections; meanwhile a new honest client reads everything.
    let idle: Vec<TcpStream> = (0..IDLE_CONNECTIONS)
        .map(|i| TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| panic!("idle connection {i}: {e}")))
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    assert_serving(port, &mut serve, "a thousand idle connections");
    let fds_idle = open_fds(pid).unwrap();
    let served = consume_all(&endpoint, topic, None, Isolation::ReadUncommitted).unwrap();
    assert_same("an honest reader beside the idle connections", &served, &first);
    drop(idle);
    // Their descriptors are released.
    let start = Instant::now();
    let fds_after = loop {
        let fds = open_fds(pid).unwrap();
        if fds <= fds_before + 16 {
            break fds;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "serve keeps {fds} descriptors after the idle connections closed ({fds_before} before)"
        );
        std::thread::sleep(Duration::from_millis(200));
    };

    // Replication goes on; the reader connected before all this follows it to the end.
    produce_round(&source, topic, partitions, 1);
    repl.wait_caught_up();
    let all = consume_all(&source, topic, None, Isolation::ReadUncommitted).unwrap();
    assert!(all.len() > first.len());
    let start = Instant::now();
    while ReaderKind::Python(Isolation::ReadUncommitted)
        .positions(&follower)
        .len()
        < all.len()
    {
        assert!(
            start.elapsed() < READ_PATIENCE,
            "the follower stopped at {} of {} records:\n{}\n--- serve ---\n{}",
            ReaderKind::Python(Isolation::ReadUncommitted)
                .positions(&follower)
                .len(),
            all.len(),
            follower.stderr(),
            serve.log()
        );
        serve.assert_running();
        std::thread::sleep(Duration::from_millis(200));
    }
    let (_, lines, _) = follower.stop();
    let got = sorted_records(lines.iter().map(|l| parse_python_line(l).unwrap()).collect());
    assert_same("the follower after the hostile clients", &got, &all);
    let committed = consume_all(&endpoint, topic, None, Isolation::ReadCommitted).unwrap();
    let want = consume_all(&source, topic, None, Isolation::ReadCommitted).unwrap();
    assert_same("read_committed after the hostile clients", &committed, &want);

    serve.assert_running();
    let rss_after = vm_rss_kib(pid).unwrap();
    eprintln!(
        "serve: VmRSS {rss_before} KiB before, {rss_after} KiB after; descriptors {fds_before} before, \
         {fds_idle} with {IDLE_CONNECTIONS} idle connections, {fds_after} after"
    );
    if !serve.is_reference() {
        assert!(rss_after < RSS_LIMIT_KIB, "serve grew to {rss_after} KiB");
    }
    serve.stop();
    repl.stop();
}

/// Clients that ask for a large response and never read it: the endpoint's fetch memory stays within
/// `--fetch-memory`, and an honest consumer still reads the whole partition meanwhile.
#[test]
fn stalled_readers_neither_starve_honest_ones_nor_grow_memory() {
    const RECORDS: u64 = 20_000;
    const FETCH_MEMORY_MIB: u64 = 64;
    let topic = "bulk";
    let install = KafkaInstall::locate().unwrap();
    let spec = TopicSpec::new(topic, 1)
        .config(install.segment_bytes_config(), 4 << 20)
        .config("retention.ms", -1);
    let mut repl = Replication::start("e2e-serve-stalled", LINK, &[spec]);
    // About 20 MB: several times what the kernel's socket buffers take in of an answer nobody reads.
    repl.broker
        .tools()
        .producer_perf(topic, RECORDS, 1000, &[("acks", "1"), ("compression.type", "none")])
        .unwrap();
    repl.wait_caught_up();
    let mut serve = if reference_mode() {
        repl.start_endpoint()
    } else {
        repl.start_serve_with(|_| {
            ["--plaintext", "--fetch-memory", &FETCH_MEMORY_MIB.to_string()]
                .map(String::from)
                .to_vec()
        })
    };
    let (port, bootstrap) = (serve.port(), serve.bootstrap());
    let stalled: Vec<TcpStream> = (0..8).map(|_| stalled_fetch(port, topic, i32::MAX)).collect();
    std::thread::sleep(Duration::from_secs(2));
    let rss_stalled = vm_rss_kib(serve.pid()).unwrap();

    // An honest reader of the whole partition (offsets only), while the stalled answers are pending.
    let started = Instant::now();
    let mut cmd = std::process::Command::new("kcat");
    cmd.args([
        "-C",
        "-b",
        &bootstrap,
        "-t",
        topic,
        "-p",
        "0",
        "-o",
        "beginning",
        "-e",
        "-q",
        "-f",
        "%o\n",
    ])
    // A request unanswered for 20 s fails the reader (the default waits a minute); Kafka serves all this in ~1 s.
    .args(["-X", "socket.timeout.ms=20000"]);
    let mut honest = Client::spawn("kcat -C", cmd, None).unwrap();
    honest.close_stdin();
    let code = honest.wait_exit(Duration::from_secs(60));
    let offsets = honest.lines();
    eprintln!(
        "honest reader beside 8 stalled fetches: {} records in {:?}; serve VmRSS {rss_stalled} KiB",
        offsets.len(),
        started.elapsed()
    );
    assert!(
        matches!(code, Ok(Some(0))) && offsets.len() as u64 == RECORDS,
        "an honest reader got {} of {RECORDS} records in {:?} ({code:?}) while 8 connections did not read \
         their Fetch answers:\n{}\n--- serve ---\n{}",
        offsets.len(),
        started.elapsed(),
        honest.stderr(),
        serve.log()
    );
    assert_eq!(
        offsets.last().map(String::as_str),
        Some((RECORDS - 1).to_string().as_str())
    );
    serve.assert_running();
    let rss = vm_rss_kib(serve.pid()).unwrap().max(rss_stalled);
    assert!(
        serve.is_reference() || rss < (FETCH_MEMORY_MIB + 100) * 1024,
        "serve holds {rss} KiB with --fetch-memory {FETCH_MEMORY_MIB}"
    );
    drop(stalled);
    serve.stop();
    repl.stop();
}
