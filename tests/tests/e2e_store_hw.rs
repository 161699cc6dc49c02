//! `segmirror ship --store URL --upto high-watermark --source-bootstrap` against a real 3-node Kafka cluster
//! (`--upto high-watermark` through a bucket): only committed records reach the bucket.
//!
//! Records above the high watermark exist only while an in-sync follower has not fetched them, so one follower of
//! the partition is frozen (SIGSTOP; the cluster's session and lag timeouts are raised so that it stays in the ISR)
//! and records are produced with acks=1: the leader's log end moves on, its high watermark does not. The shipper,
//! beside the leader and asking it for high watermarks (ListOffsets), must leave those records out of the bucket
//! for as long as they are uncommitted — the bucket's manifests never reach past the high watermark the broker
//! reports — and ship them once the follower runs again and the watermark passes them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use segmirror_tests::cluster::{ClusterConfig, KafkaCluster};
use segmirror_tests::service::Service;
use segmirror_tests::wait::wait_for;
use segmirror_tests::*;

const TOPIC: &str = "store-hw";
/// Longer than the test's frozen window: the frozen follower is neither fenced nor dropped from the ISR.
const FROZEN_TIMEOUT_MS: u32 = 120_000;
const PATIENCE: Duration = Duration::from_secs(180);
const POLL: Duration = Duration::from_millis(200);

/// The highest `next_offset` of the bucket's manifests for partition 0, and the highest last offset any holds.
fn shipped(bucket: &Path) -> (i64, i64) {
    let partition = bucket.join("dr").join(TOPIC).join("0");
    let mut next = 0;
    let mut last = -1;
    let Ok(lineages) = std::fs::read_dir(&partition) else {
        return (next, last);
    };
    for lineage in lineages.flatten() {
        let Ok(manifests) = std::fs::read_dir(lineage.path().join("manifests")) else {
            continue;
        };
        for m in manifests.flatten() {
            let Ok(bytes) = std::fs::read(m.path()) else { continue };
            let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            next = next.max(json["next_offset"].as_i64().unwrap());
            last = last.max(json["last_offset"].as_i64().unwrap_or(-1));
        }
    }
    (next, last)
}

fn signal(pid: u32, sig: &str) {
    let status = Command::new("kill").args([sig, &pid.to_string()]).status().unwrap();
    assert!(status.success(), "kill {sig} {pid}");
}

fn records(tag: &str, n: usize) -> Vec<OutRecord> {
    (0..n)
        .map(|i| OutRecord {
            partition: Some(0),
            key: Some(format!("{tag}-{i}").into_bytes()),
            value: Some(vec![b'v'; 200]),
            headers: Vec::new(),
            timestamp: None,
        })
        .collect()
}

#[test]
fn only_committed_records_reach_the_bucket_and_the_rest_follows_once_committed() {
    let mut cluster = KafkaCluster::start(
        ClusterConfig::new("store-hw")
            .property("broker.session.timeout.ms", FROZEN_TIMEOUT_MS)
            .property("replica.lag.time.max.ms", FROZEN_TIMEOUT_MS),
    )
    .unwrap();
    cluster.create_topic(TOPIC, 1, &[]).unwrap();
    let state = cluster.partition(TOPIC, 0).unwrap();
    let leader = state.leader;
    let follower = *state.replicas.iter().find(|&&n| n != leader).unwrap();
    let leader_bootstrap = cluster.node(leader).unwrap().bootstrap();
    // Committed: acks=all with every replica fetching.
    let plan = ProducePlan::new(TOPIC)
        .config("acks", "all")
        .step(ProduceStep::Send(records("a", 20)));
    python_produce(&leader_bootstrap, &plan).unwrap();

    let work = tempfile::tempdir().unwrap();
    let bucket: PathBuf = work.path().join("bucket");
    std::fs::create_dir_all(&bucket).unwrap();
    let log_dir = cluster.node(leader).unwrap().log_dir().to_path_buf();
    let args = [
        "ship",
        "--store",
        bucket.to_str().unwrap(),
        "--log-dir",
        log_dir.to_str().unwrap(),
        "--link",
        "dr",
        "--source-bootstrap",
        &leader_bootstrap,
        "--upload-interval-ms",
        "200",
    ];
    let mut shipper = Service::start_with_env("ship", args, &[]);
    wait_for("the committed records in the bucket", PATIENCE, POLL, || {
        Ok((shipped(&bucket).0 == 20).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", shipper.log()));

    // Uncommitted: a follower frozen in the ISR, records acknowledged by the leader alone.
    let frozen = cluster.node(follower).unwrap().pid().unwrap();
    signal(frozen, "-STOP");
    let plan = ProducePlan::new(TOPIC)
        .config("acks", "1")
        .step(ProduceStep::Send(records("b", 10)));
    python_produce(&leader_bootstrap, &plan).unwrap();
    let tools = cluster.node(leader).unwrap().tools();
    let hw = tools.end_offsets(TOPIC).unwrap()[&0];
    assert_eq!(hw, 20, "the frozen follower holds the high watermark");
    // Many upload intervals: every round sees the grown segment and must leave it.
    std::thread::sleep(Duration::from_secs(4));
    shipper.assert_running();
    let (next, last) = shipped(&bucket);
    assert_eq!((next, last), (20, 19), "nothing above the high watermark {hw} shipped");
    assert!(
        tools.end_offsets(TOPIC).unwrap()[&0] == 20,
        "the high watermark stayed while the bucket was looked at"
    );
    let log = shipper.log();
    assert!(log.contains("NotCommitted"), "the shipper says why it waits:\n{log}");

    // Committed once the follower fetches again: the rest follows.
    signal(frozen, "-CONT");
    wait_for("the rest in the bucket", PATIENCE, POLL, || {
        Ok((shipped(&bucket).0 == 30).then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", shipper.log()));
    assert_eq!(tools.end_offsets(TOPIC).unwrap()[&0], 30);
    let (code, log) = shipper.stop();
    assert_eq!(code, Some(0), "ship on SIGTERM:\n{log}");
}
