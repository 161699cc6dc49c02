//! A consumer group that read a replica through `segmirror serve` keeps its position across `segmirror failover`:
//! the group moves from the endpoint to the target cluster and resumes exactly where it committed.
//!
//! The scene: a Kafka 4.4 source broker (`orders`, 3 partitions, small segments) replicated by `ship --connect`
//! (with `--metadata-log-dir` and `--groups`) into `apply --listen`, `segmirror serve` over the mirror, and a Kafka
//! 4.4 target broker the failover installs into. The link record on the mirror host names the target cluster.
//!
//! - On the source, group `readers` committed early (3 on every partition), before the application moved to the
//!   endpoint; group `solo` committed on the source only.
//! - On the endpoint, `readers` runs as two confluent-kafka members (classic protocol, a rebalance when the second
//!   joins): the endpoint answers their OffsetFetch with the source group's offsets the link carried, so they start
//!   where the group stood on the source (offset 3); each partition is read for a count of records chosen per
//!   partition, and every member commits
//!   synchronously what it stored (offsets with the leader epoch of the record read). OffsetFetch on the endpoint
//!   and the catalog's served offsets then hold exactly those offsets.
//! - Group `ahead` commits on the endpoint past the end of partition 0 (Kafka accepts any offset).
//! - More records reach the source; `segmirror failover --link --drain` installs everything into the target broker
//!   (its hooks stop and start it) and commits the groups' offsets: the endpoint's commit of `readers` wins over
//!   its older source commit, `solo` keeps its source offsets, `ahead` is clamped to the installed end.
//! - The endpoint stops once the link is promoted (exit 0), saying the topics live on the target cluster it names.
//! - On the target, OffsetFetch shows each group's offsets; a `readers` member resumes at exactly the offset
//!   committed on the endpoint in every partition and reads the source's records from there to the end (none
//!   twice, none skipped); the whole target topic is the source's record by record (offsets, keys, values).

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use segmirror_catalog::Catalog;
use segmirror_tests::clients::{
    python_group_commit, python_group_resume, record_identities, GroupProtocol, ResumedRecord,
};
use segmirror_tests::install::{repo_root, require_python_client};
use segmirror_tests::ports::free_port;
use segmirror_tests::segmirror_cli::run_segmirror;
use segmirror_tests::service::Service;
use segmirror_tests::*;
use serde_json::{json, Value};

const ORDERS: &str = "orders";
const PARTITIONS: i32 = 3;
const LINK: &str = "dr";
/// Records per partition before the group reads, and after it committed.
const FIRST: usize = 40;
const MORE: usize = 10;
/// How many records of each partition the group reads on the endpoint before it commits: different per partition,
/// so that an offset landing on the wrong partition shows.
const TAKE: [usize; 3] = [7, 19, 31];
/// What `readers` committed on the source before moving to the endpoint (older: must lose), and `solo`'s.
const READERS_ON_SOURCE: i64 = 3;
const SOLO: [i64; 3] = [5, 6, 7];
/// What group `ahead` commits on the endpoint: partition 0 beyond any record, partition 1 within.
const AHEAD: [(i32, i64); 2] = [(0, 1000), (1, 12)];
/// Guard against hangs; never a speed assertion.
const PATIENCE: Duration = Duration::from_secs(90);

fn path(p: &Path) -> String {
    p.display().to_string()
}

fn produce(bootstrap: &str, from: usize, count: usize, tag: &str) {
    let records: Vec<OutRecord> = (0..PARTITIONS)
        .flat_map(|p| {
            (from..from + count).map(move |i| OutRecord {
                partition: Some(p),
                key: Some(format!("k{p}-{i}").into_bytes()),
                value: Some(format!("{tag}-{p}-{i}-{}", "v".repeat(300)).into_bytes()),
                headers: vec![],
                timestamp: None,
            })
        })
        .collect();
    python_produce(bootstrap, &ProducePlan::new(ORDERS).step(ProduceStep::Send(records))).unwrap();
}

/// `tests/python/serve_failover.py COMMAND` with `request`: the JSON object it printed.
fn serve_failover_py(command: &str, request: &Value) -> anyhow::Result<Value> {
    require_python_client()?;
    let script = repo_root().join("tests").join("python").join("serve_failover.py");
    let mut child = Command::new("python3")
        .arg(&script)
        .arg(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawning {}", script.display()))?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().context("stdin")?;
        writeln!(stdin, "{request}")?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "serve_failover.py {command} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = String::from_utf8(out.stdout)?;
    serde_json::from_str(text.trim()).with_context(|| format!("serve_failover.py {command} printed {text:?}"))
}

/// `[[a, b, c], ..]` as tuples (`c` an optional integer).
fn triples(v: &Value) -> Vec<(i64, i64, Option<i64>)> {
    v.as_array()
        .unwrap_or_else(|| panic!("not an array: {v}"))
        .iter()
        .map(|t| (t[0].as_i64().unwrap(), t[1].as_i64().unwrap(), t[2].as_i64()))
        .collect()
}

/// OffsetFetch of `group` at `bootstrap`, without joining: (partition, offset, leader epoch).
fn offset_fetch(bootstrap: &str, group: &str) -> Vec<(i64, i64, Option<i64>)> {
    let request = json!({"bootstrap": bootstrap, "topic": ORDERS, "group": group,
                         "partitions": (0..PARTITIONS).collect::<Vec<_>>()});
    triples(&serve_failover_py("committed", &request).unwrap()["offsets"])
}

/// Per partition, the `.log` files of a log dir: (name, length).
fn logs(root: &Path) -> Vec<Vec<(String, u64)>> {
    (0..PARTITIONS)
        .map(|p| {
            let mut files: Vec<(String, u64)> = std::fs::read_dir(root.join(format!("{ORDERS}-{p}")))
                .map(|entries| {
                    entries
                        .filter_map(Result::ok)
                        .filter(|e| e.path().extension().is_some_and(|x| x == "log"))
                        .map(|e| {
                            let len = e.metadata().map_or(0, |m| m.len());
                            (e.file_name().to_string_lossy().into_owned(), len)
                        })
                        .collect()
                })
                .unwrap_or_default();
            files.sort();
            files
        })
        .collect()
}

/// The source groups' offsets the link recorded in the applier's catalog.
fn recorded_offsets(catalog: &Path) -> BTreeMap<(String, i32), i64> {
    let Ok(catalog) = Catalog::open(catalog) else {
        return BTreeMap::new();
    };
    catalog
        .link_offsets(LINK)
        .unwrap_or_default()
        .into_iter()
        .map(|o| ((o.group, o.partition), o.source_offset))
        .collect()
}

/// Serve the failover's hooks until it exits: a hook writes `<step>.requested` and waits for `<step>.done`; the
/// test stops or starts the target broker in between.
fn run_hooks(failover: &mut Service, target: &mut KafkaBroker, signals: &Path) -> (Option<i32>, String) {
    let started = Instant::now();
    loop {
        if let Some(status) = failover.exited() {
            std::thread::sleep(Duration::from_millis(100));
            return (status.code(), failover.log());
        }
        if signals.join("stop.requested").exists() && !signals.join("stop.done").exists() {
            target.stop().unwrap();
            std::fs::write(signals.join("stop.done"), b"").unwrap();
        }
        if signals.join("start.requested").exists() && !signals.join("start.done").exists() {
            target.restart().unwrap();
            std::fs::write(signals.join("start.done"), b"").unwrap();
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the failover did not finish:\n{}",
            failover.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_group_that_read_the_endpoint_resumes_on_the_target_at_its_committed_offsets() {
    // Both brokers start at once (two JVMs starting side by side).
    let mut source = KafkaBroker::spawn(BrokerConfig::new("serve-failover-source")).unwrap();
    let mut target = KafkaBroker::spawn(BrokerConfig::new("serve-failover-target")).unwrap();
    source.wait_until_started().unwrap();
    target.wait_until_started().unwrap();
    let (source_bootstrap, target_bootstrap) = (source.bootstrap(), target.bootstrap());
    // Small segments: the mirror holds sealed segments and an active one.
    let spec = TopicSpec::new(ORDERS, PARTITIONS)
        .config(source.install().segment_bytes_config(), 16 * 1024)
        .config("retention.ms", -1);
    admin(&source_bootstrap, &[spec], &[]).unwrap();
    produce(&source_bootstrap, 0, FIRST, "first");
    let all_partitions: Vec<(i32, i64)> = (0..PARTITIONS).map(|p| (p, READERS_ON_SOURCE)).collect();
    python_group_commit(
        &source_bootstrap,
        ORDERS,
        "readers",
        GroupProtocol::Classic,
        &all_partitions,
    )
    .unwrap();
    let solo: Vec<(i32, i64)> = (0..PARTITIONS).map(|p| (p, SOLO[p as usize])).collect();
    python_group_commit(&source_bootstrap, ORDERS, "solo", GroupProtocol::Classic, &solo).unwrap();

    // The mirror host's link record names the target cluster; the applier, the shipper and the endpoint.
    let work = tempfile::tempdir().unwrap();
    let (mirror, signals) = (work.path().join("mirror"), work.path().join("signals"));
    std::fs::create_dir_all(&signals).unwrap();
    let catalog = work.path().join("catalog.sqlite");
    let create = run_segmirror([
        "link",
        "--catalog",
        &path(&catalog),
        "create",
        LINK,
        "--transport",
        "direct",
        "--address",
        "127.0.0.1:9400",
        "--source",
        "serve-failover-source",
        "--target",
        &target_bootstrap,
        "--consumer-groups-regex",
        "readers|solo",
    ])
    .unwrap();
    assert_eq!(create.code, 0, "{create}");
    let mut applier = Service::start(
        "apply",
        [
            "apply",
            "--listen",
            "127.0.0.1:0",
            "--plaintext",
            "--mirror",
            &path(&mirror),
            "--catalog",
            &path(&catalog),
            "--link",
            LINK,
        ],
    )
    .patience(PATIENCE);
    let addr = applier.wait_for("listening on ").trim().to_string();
    let source_log_dir = path(source.log_dir());
    let mut shipper = Service::start(
        "ship",
        [
            "ship",
            "--connect",
            &addr,
            "--plaintext",
            "--link",
            LINK,
            "--log-dir",
            &source_log_dir,
            "--metadata-log-dir",
            &source_log_dir,
            "--upto",
            "log-end",
            "--groups",
            "readers|solo",
            "--meta-interval-ms",
            "200",
        ],
    )
    .patience(PATIENCE);
    let port = free_port().unwrap();
    let endpoint = format!("127.0.0.1:{port}");
    let mut serve = Service::start(
        "serve",
        [
            "serve",
            "--mirror",
            &path(&mirror),
            "--catalog",
            &path(&catalog),
            "--link",
            LINK,
            "--listen",
            &endpoint,
            "--plaintext",
        ],
    )
    .patience(PATIENCE);
    serve.wait_for(&format!("segmirror serve: link {LINK} on {endpoint}"));

    // The mirror holds the source's segments, and the source groups' offsets are recorded.
    let expected_recorded: BTreeMap<(String, i32), i64> = (0..PARTITIONS)
        .flat_map(|p| {
            [
                (("readers".to_string(), p), READERS_ON_SOURCE),
                (("solo".to_string(), p), SOLO[p as usize]),
            ]
        })
        .collect();
    let start = Instant::now();
    loop {
        for service in [&mut applier, &mut shipper, &mut serve] {
            service.assert_running();
        }
        let (src, mir) = (logs(source.log_dir()), logs(&mirror));
        if src == mir && src.iter().all(|s| !s.is_empty()) && recorded_offsets(&catalog) == expected_recorded {
            break;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "the mirror never caught up: source {src:?}, mirror {mir:?}, offsets {:?}",
            recorded_offsets(&catalog)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let first_records = consume_all(&source_bootstrap, ORDERS, None, Isolation::ReadUncommitted).unwrap();
    assert_eq!(first_records.len(), FIRST * PARTITIONS as usize);
    // Where the group must stand after reading TAKE[p] records of each partition from where it stood on the source
    // (the endpoint answers OffsetFetch with the source's offsets for partitions never committed on it).
    let of =
        |records: &[Record], p: i32| -> Vec<Record> { records.iter().filter(|r| r.partition == p).cloned().collect() };
    let start = READERS_ON_SOURCE as usize;
    let position: Vec<i64> = (0..PARTITIONS)
        .map(|p| of(&first_records, p)[start + TAKE[p as usize] - 1].offset + 1)
        .collect();

    // Two members of `readers` on the endpoint read part of each partition and commit.
    let take: BTreeMap<String, usize> = (0..PARTITIONS).map(|p| (p.to_string(), TAKE[p as usize])).collect();
    let group = serve_failover_py(
        "take",
        &json!({"bootstrap": endpoint, "topic": ORDERS, "group": "readers", "members": 2, "take": take,
                "timeout_s": PATIENCE.as_secs()}),
    )
    .unwrap_or_else(|e| panic!("{e:#}\n--- serve ---\n{}", serve.log()));
    let shares = group["members"].as_array().unwrap();
    assert!(
        shares.len() == 2 && shares.iter().all(|s| !s.as_array().unwrap().is_empty()),
        "both members hold partitions after the rebalance: {group}"
    );
    let read: Vec<(i64, i64, i64, i64)> = group["read"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r[0].as_i64().unwrap(),
                r[1].as_i64().unwrap(),
                r[2].as_i64().unwrap(),
                r[3].as_i64().unwrap(),
            )
        })
        .collect();
    let want_read: Vec<(i64, i64, i64, i64)> = (0..PARTITIONS)
        .map(|p| {
            let records = of(&first_records, p);
            let n = TAKE[p as usize];
            (p as i64, records[start].offset, records[start + n - 1].offset, n as i64)
        })
        .collect();
    assert_eq!(read, want_read, "(partition, first, last, count) read on the endpoint");
    let committed = triples(&group["committed"]);
    let committed_offsets: Vec<(i64, i64)> = committed.iter().map(|(p, o, _)| (*p, *o)).collect();
    let want_offsets: Vec<(i64, i64)> = (0..PARTITIONS).map(|p| (p as i64, position[p as usize])).collect();
    assert_eq!(committed_offsets, want_offsets, "what the members committed: {group}");
    // The endpoint answers OffsetFetch with exactly that (leader epochs included), and the catalog holds it.
    assert_eq!(
        offset_fetch(&endpoint, "readers"),
        committed,
        "OffsetFetch on the endpoint"
    );
    let served: Vec<(i64, i64, Option<i64>)> = Catalog::open(&catalog)
        .unwrap()
        .served_offsets(LINK, "readers")
        .unwrap()
        .into_iter()
        .map(|o| {
            assert_eq!(o.topic, ORDERS);
            (i64::from(o.partition), o.offset, o.leader_epoch.map(i64::from))
        })
        .collect();
    assert_eq!(served, committed, "the catalog's served offsets");
    // A group that committed on the endpoint beyond the end of partition 0 (Kafka accepts any offset): the
    // failover clamps it to what it installed.
    python_group_commit(&endpoint, ORDERS, "ahead", GroupProtocol::Classic, &AHEAD).unwrap();

    // Replication goes on: more records after the commit, which the group reads on the target.
    produce(&source_bootstrap, FIRST, MORE, "more");
    let source_records = consume_all(&source_bootstrap, ORDERS, None, Isolation::ReadUncommitted).unwrap();
    assert_eq!(source_records.len(), (FIRST + MORE) * PARTITIONS as usize);

    // The failover: drain, install into the target broker (stopped and started by the hooks), commit offsets.
    let hook = |step: &str| {
        let s = path(&signals);
        format!("touch {s}/{step}.requested; while [ ! -e {s}/{step}.done ]; do sleep 0.05; done")
    };
    let mut failover = Service::start_with_stdout(
        "failover",
        [
            "failover",
            "--link",
            LINK,
            "--mirror",
            &path(&mirror),
            "--catalog",
            &path(&catalog),
            "--drain",
            "--drain-quiet",
            "2",
            "--bootstrap",
            &target_bootstrap,
            "--log-dir",
            &path(target.log_dir()),
            "--stop-hook",
            &hook("stop"),
            "--start-hook",
            &hook("start"),
        ],
    )
    .patience(PATIENCE);
    let (code, log) = run_hooks(&mut failover, &mut target, &signals);
    println!("--- segmirror failover ---\n{log}");
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("3 partition(s) installed"), "{log}");
    // readers (3 partitions, the endpoint's commit winning over the source's), solo (3) and ahead (2, one clamped
    // to the installed end).
    let end = (FIRST + MORE) as i64;
    assert!(
        log.contains("8 offset(s) of 3 group(s) committed (8 recorded), 1 clamped to the installed data"),
        "{log}"
    );
    let row = |group: &str, partition: i32| -> Vec<String> {
        log.lines()
            .map(|l| l.split_whitespace().map(String::from).collect::<Vec<_>>())
            .find(|f| f.len() >= 5 && f[0] == group && f[1] == ORDERS && f[2] == partition.to_string())
            .unwrap_or_else(|| panic!("no commit of {group} {partition} in\n{log}"))
    };
    assert_eq!(
        row("ahead", 0)[3..5],
        [AHEAD[0].1.to_string(), end.to_string()],
        "{log}"
    );

    // The endpoint stopped when the link was promoted, and says where the topics live now.
    let (code, serve_log) = serve.wait_exit();
    assert_eq!(code, Some(0), "serve:\n{serve_log}");
    assert!(
        serve_log.contains(&format!(
            "segmirror serve: link {LINK} was promoted: its topics are read and written on the target cluster \
             ({target_bootstrap}) now"
        )),
        "serve:\n{serve_log}"
    );
    assert!(
        TcpStream::connect(&endpoint).is_err(),
        "the endpoint still accepts connections"
    );

    // On the target: each group's offsets (no leader epoch: the target's epochs are its own).
    let on_target = |offsets: &[i64]| -> Vec<(i64, i64, Option<i64>)> {
        offsets.iter().enumerate().map(|(p, o)| (p as i64, *o, None)).collect()
    };
    assert_eq!(
        offset_fetch(&target_bootstrap, "readers"),
        on_target(&position),
        "readers on the target: the endpoint's commit, not the older source one"
    );
    assert_eq!(
        offset_fetch(&target_bootstrap, "solo"),
        on_target(&SOLO),
        "solo on the target"
    );
    assert_eq!(
        offset_fetch(&target_bootstrap, "ahead"),
        [(0, end, None), (1, AHEAD[1].1, None), (2, -1001, None)],
        "ahead on the target: clamped to the installed end, nothing where it committed nothing"
    );

    // A member of readers resumes exactly at the endpoint's commit and reads the source's records to the end.
    let mut resumed = python_group_resume(
        &target_bootstrap,
        ORDERS,
        PARTITIONS as usize,
        "readers",
        GroupProtocol::Classic,
    )
    .unwrap();
    for p in 0..PARTITIONS {
        let first = resumed.iter().find(|r| r.0 == p).map(|r| r.1);
        assert_eq!(
            first,
            Some(position[p as usize]),
            "the first record readers read on the target in partition {p}"
        );
    }
    let mut want: Vec<ResumedRecord> = source_records
        .iter()
        .filter(|r| r.offset >= position[r.partition as usize])
        .map(|r| (r.partition, r.offset, r.value.clone()))
        .collect();
    want.sort();
    assert_eq!(resumed.len(), want.len(), "no record twice, none skipped");
    resumed.sort();
    assert_eq!(resumed, want, "what readers read on the target");
    // The target topic is the source's, record by record.
    let target_records = consume_all(&target_bootstrap, ORDERS, None, Isolation::ReadUncommitted).unwrap();
    assert_eq!(
        record_identities(&target_records),
        record_identities(&source_records),
        "the target topic"
    );

    drop(shipper);
    drop(applier);
    target.stop().unwrap();
}
