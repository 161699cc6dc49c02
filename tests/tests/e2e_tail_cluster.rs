//! Continuous replication of a 3-broker source cluster (a shipper per broker, leaders moving): a real KRaft cluster
//! (replication factor 3, `min.insync.replicas` 2, small segments so every replica rolls several times, each at its
//! own offsets), an idempotent `acks=all` Python producer writing at a steady pace to two partitions, one `segmirror
//! ship --cluster --upto high-watermark --source-bootstrap <its broker>` beside each broker and one `segmirror apply
//! --listen --cluster`. While the producer runs the test SIGKILLs the leader of partition 0 *and* the shipper beside
//! it; leadership moves, the new leader's shipper claims the partition at the higher leader epoch and continues the
//! mirror mid-segment of its own replica; later both the broker and its shipper are restarted.
//!
//! After the producer stops and the mirror caught up (its end offsets equal the source's high watermarks as a
//! consumer reads them): every partition's mirror holds the same batches as the source, byte for byte and in order
//! (no batch skipped or doubled across the handover, wherever the segments were cut), `verify --deep --strict` finds
//! the mirror sound, `promote` installs it into a stopped target broker, and consumers of the target read every
//! acknowledged record exactly once at the offset the source gave it, and exactly what the source serves.
//!
//! Lean by design (one cluster, two partitions, about 1.5k small records): the expensive parts are the JVMs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use segment_format::log::scan_frames;
use segmirror_tests::clients::record_identities;
use segmirror_tests::mirror::segmirror_promote;
use segmirror_tests::ports::free_port;
use segmirror_tests::segmirror_cli::segmirror_verify;
use segmirror_tests::service::{Service, Settle, Settling};
use segmirror_tests::wait::wait_for;
use segmirror_tests::*;

const TOPIC: &str = "clustered";
const PARTITIONS: i32 = 2;
/// Small segments: each replica rolls many times during the run (at its own offsets: a follower appends whole
/// fetches), so the handover lands inside a segment of another layout.
const SEGMENT_BYTES: u64 = 8 * 1024;
/// Segments also roll by time (`segment.ms`), each replica with its own random `segment.jitter.ms` per segment, so
/// the replicas' layouts differ (as a follower's do when it appends whole fetches) and the new leader's shipper
/// usually continues the mirror inside a segment of another layout (translation, then a `Roll`).
const SEGMENT_MS: u64 = 1500;
const SEGMENT_JITTER_MS: u64 = 1400;
/// Records per flushed produce step (split over both partitions), and steps per producer process.
const RECORDS_PER_STEP: usize = 20;
const STEPS_PER_CALL: usize = 8;
const VALUE_BYTES: usize = 120;
/// The producer runs at least this many calls before the kill and this many more after each disruption.
const CALLS_BEFORE_KILL: usize = 2;
const CALLS_AFTER_KILL: usize = 1;
/// Failure guard for anything the test waits for; nothing is asserted about speed.
const PATIENCE: Duration = Duration::from_secs(180);
const POLL: Duration = Duration::from_millis(200);
/// The compared state must hold this long to count as settled.
const SETTLED_FOR: Duration = Duration::from_millis(1000);

fn record(call: usize, step: usize, i: usize) -> OutRecord {
    OutRecord {
        partition: Some((i % PARTITIONS as usize) as i32),
        key: Some(format!("k-{call}-{step}-{i}").into_bytes()),
        value: Some(vec![b'a' + ((call + step + i) % 26) as u8; VALUE_BYTES]),
        headers: Vec::new(),
        timestamp: None,
    }
}

/// One producer process: an idempotent `acks=all` producer sending [`STEPS_PER_CALL`] flushed steps.
fn produce_call(bootstrap: &str, call: usize) -> Vec<Record> {
    let mut plan = ProducePlan::new(TOPIC)
        .config("enable.idempotence", "true")
        .config("acks", "all")
        .config("linger.ms", "5")
        .config("batch.size", "4096");
    for step in 0..STEPS_PER_CALL {
        plan = plan.step(ProduceStep::Send(
            (0..RECORDS_PER_STEP).map(|i| record(call, step, i)).collect(),
        ));
    }
    python_produce(bootstrap, &plan).unwrap()
}

/// The `.log` files of a partition directory, by base offset (none if it does not exist yet).
fn logs(dir: &Path) -> BTreeMap<i64, PathBuf> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if let Some(base) = name.strip_suffix(".log").and_then(|s| s.parse::<i64>().ok()) {
            out.insert(base, path);
        }
    }
    out
}

/// A partition directory's whole batches, concatenated in offset order, and the offset after the last one.
/// Replicas hold the same batches byte for byte wherever each cut its segments, so two directories holding the
/// same records give the same bytes.
fn batches(dir: &Path) -> (Vec<u8>, i64) {
    let mut out = Vec::new();
    let mut end = 0;
    for path in logs(dir).values() {
        let bytes = std::fs::read(path).unwrap_or_default();
        for frame in scan_frames(&bytes, 0).map_while(Result::ok) {
            out.extend_from_slice(frame.bytes);
            end = frame.info.last_offset + 1;
        }
    }
    (out, end)
}

fn ship_args(cluster: &KafkaCluster, node: i32, applier: &str) -> Vec<String> {
    let broker = cluster.node(node).unwrap();
    [
        "ship",
        "--log-dir",
        broker.log_dir().to_str().unwrap(),
        "--link",
        "dr",
        "--upto",
        "high-watermark",
        "--source-bootstrap",
        &broker.bootstrap(),
        "--cluster",
        "--connect",
        applier,
        "--plaintext",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn a_three_broker_source_with_its_leader_and_shipper_killed_promotes_exactly_once() {
    let started = Instant::now();
    let mut cluster = KafkaCluster::start(ClusterConfig::new("e2e-tail-cluster")).unwrap();
    let segment_bytes = cluster.node(1).unwrap().install().segment_bytes_config();
    cluster
        .create_topic(
            TOPIC,
            PARTITIONS,
            &[
                (segment_bytes, SEGMENT_BYTES.to_string()),
                ("segment.ms", SEGMENT_MS.to_string()),
                ("segment.jitter.ms", SEGMENT_JITTER_MS.to_string()),
                ("retention.ms", "-1".to_string()),
            ],
        )
        .unwrap();
    let all_bootstrap = cluster.bootstrap();
    eprintln!("cluster up after {:?}", started.elapsed());

    let mirror = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let catalog = work.path().join("catalog.sqlite");
    let applier_addr = format!("127.0.0.1:{}", free_port().unwrap());
    let mut applier = Service::start(
        "apply --cluster",
        [
            "apply",
            "--mirror",
            mirror.path().to_str().unwrap(),
            "--catalog",
            catalog.to_str().unwrap(),
            "--link",
            "dr",
            "--listen",
            &applier_addr,
            "--plaintext",
            "--cluster",
        ],
    );
    applier.wait_for("listening on ");
    let mut shippers: BTreeMap<i32, Service> = cluster
        .node_ids()
        .into_iter()
        .map(|id| {
            let name = format!("ship node {id}");
            (id, Service::start(&name, ship_args(&cluster, id, &applier_addr)))
        })
        .collect();

    // The producer: one call after another until told to stop (and at least the calls asked for).
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let acked: Arc<Mutex<Vec<Record>>> = Arc::default();
    let producer = {
        let (stop, calls, acked, bootstrap) = (stop.clone(), calls.clone(), acked.clone(), all_bootstrap.clone());
        std::thread::spawn(move || {
            let mut call = 0;
            while !stop.load(Ordering::SeqCst) {
                let records = produce_call(&bootstrap, call);
                acked.lock().unwrap().extend(records);
                call += 1;
                calls.store(call, Ordering::SeqCst);
            }
        })
    };
    // `down`: the node whose shipper is killed now.
    let wait_calls = |n: usize, shippers: &mut BTreeMap<i32, Service>, applier: &mut Service, down: Option<i32>| {
        let start = Instant::now();
        while calls.load(Ordering::SeqCst) < n {
            assert!(start.elapsed() < PATIENCE, "the producer made no progress");
            applier.assert_running();
            for (id, s) in shippers.iter_mut() {
                if Some(*id) != down {
                    s.assert_running();
                }
            }
            std::thread::sleep(POLL);
        }
    };
    let mirror_dir = |p: i32| mirror.path().join(format!("{TOPIC}-{p}"));

    // Mirroring has begun: partition 0's mirror holds records.
    wait_calls(CALLS_BEFORE_KILL, &mut shippers, &mut applier, None);
    wait_for("partition 0 in the mirror", PATIENCE, POLL, || {
        Ok((batches(&mirror_dir(0)).1 > 0).then_some(()))
    })
    .unwrap();

    // The leader of partition 0 and the shipper beside it die together, mid-stream.
    let old = cluster.partition(TOPIC, 0).unwrap().leader;
    shippers.get_mut(&old).unwrap().kill();
    cluster.kill(old).unwrap();
    let killed_at_mirror_end = batches(&mirror_dir(0)).1;
    let new = cluster.wait_for_new_leader(TOPIC, 0, old).unwrap();
    eprintln!(
        "node {old} (leader of {TOPIC}-0) and its shipper killed with the mirror at offset {killed_at_mirror_end}; \
         node {new} leads"
    );
    // The new leader's shipper continues the mirror: it grows past where it stood while the old node is down.
    let before = calls.load(Ordering::SeqCst);
    wait_calls(before + CALLS_AFTER_KILL, &mut shippers, &mut applier, Some(old));
    let grown_to = wait_for(
        "the mirror of partition 0 growing after the kill",
        PATIENCE,
        POLL,
        || {
            let end = batches(&mirror_dir(0)).1;
            Ok((end > killed_at_mirror_end).then_some(end))
        },
    )
    .unwrap();

    // Both come back; the producer goes on a little longer with all three nodes.
    cluster.restart(old).unwrap();
    shippers.get_mut(&old).unwrap().restart();
    cluster.wait_in_sync(TOPIC, 0, old).unwrap();
    eprintln!("node {old} and its shipper back after {:?}", started.elapsed());
    stop.store(true, Ordering::SeqCst);
    producer.join().unwrap();
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    eprintln!(
        "{} records acknowledged in {} producer calls; mirror of partition 0 at {grown_to} while node {old} was down",
        acked.len(),
        calls.load(Ordering::SeqCst)
    );

    // The source's high watermarks, as a consumer reads them (read_uncommitted reads up to the high watermark).
    let source_records = consume_all(&all_bootstrap, TOPIC, None, Isolation::ReadUncommitted).unwrap();
    let mut high_watermarks = BTreeMap::new();
    for r in &source_records {
        let hw = high_watermarks.entry(r.partition).or_insert(0);
        *hw = (*hw).max(r.offset + 1);
    }
    assert_eq!(high_watermarks.len(), PARTITIONS as usize, "{high_watermarks:?}");

    // Catch up: every partition's mirror ends at the source's high watermark, and stays there.
    let mut settle = Settle::new(SETTLED_FOR, PATIENCE);
    loop {
        applier.assert_running();
        for s in shippers.values_mut() {
            s.assert_running();
        }
        let ends: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, batches(&mirror_dir(p)).1)).collect();
        match settle.observe(ends == high_watermarks, ends.clone()) {
            Settling::Settled => break,
            Settling::Waiting => {}
            Settling::TimedOut => panic!(
                "the mirror never caught up: mirror ends {ends:?}, source high watermarks {high_watermarks:?}\n\
                 --- apply ---\n{}\n{}",
                applier.log(),
                shippers
                    .values()
                    .map(|s| format!("--- {} ---\n{}", s.name(), s.log()))
                    .collect::<Vec<_>>()
                    .join("\n")
            ),
        }
        std::thread::sleep(POLL);
    }

    eprintln!("caught up after {:?}", started.elapsed());
    // Nothing skipped or doubled across the handover: the mirror's batches are the source's, byte for byte.
    for p in 0..PARTITIONS {
        let leader = cluster.partition(TOPIC, p).unwrap().leader;
        let (source_bytes, source_end) = batches(&cluster.node(leader).unwrap().partition_dir(TOPIC, p));
        let (mirror_bytes, mirror_end) = batches(&mirror_dir(p));
        assert_eq!(mirror_end, source_end, "{TOPIC}-{p}");
        assert!(
            mirror_bytes == source_bytes,
            "{TOPIC}-{p}: the mirror's batches ({} bytes) differ from node {leader}'s ({} bytes)",
            mirror_bytes.len(),
            source_bytes.len()
        );
        let mirror_layout: Vec<i64> = logs(&mirror_dir(p)).into_keys().collect();
        let replica_layouts: BTreeMap<i32, Vec<i64>> = cluster
            .node_ids()
            .into_iter()
            .map(|id| {
                (
                    id,
                    logs(&cluster.node(id).unwrap().partition_dir(TOPIC, p))
                        .into_keys()
                        .collect(),
                )
            })
            .collect();
        // A mirror segment list equal to no replica's: the mirror was continued inside another layout.
        let spliced = replica_layouts.values().all(|l| *l != mirror_layout);
        eprintln!(
            "{TOPIC}-{p}: mirror segments {mirror_layout:?} ({}), replicas {replica_layouts:?}",
            if spliced {
                "continued across layouts"
            } else {
                "one replica's layout"
            }
        );
    }
    // The claim of partition 0 moved to a new leader at a higher epoch (status reads the applier's records).
    let status =
        segmirror_tests::segmirror_cli::run_segmirror(["status", "--json", "--catalog", catalog.to_str().unwrap()])
            .unwrap();
    assert_eq!(status.code, 0, "{status}");
    let doc = status.json().unwrap();
    let claim_of_0 = doc["tail"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["topic"] == TOPIC && r["partition"] == 0))
        .cloned()
        .unwrap_or_else(|| panic!("no tail row of {TOPIC}-0: {doc}"));
    assert_ne!(claim_of_0["claim_node"], old, "{claim_of_0}");

    for (_, s) in std::mem::take(&mut shippers) {
        let name = s.name().to_string();
        let (code, log) = s.stop();
        assert_eq!(code, Some(0), "{name}:\n{log}");
    }
    let (code, apply_log) = applier.stop();
    assert_eq!(code, Some(0), "apply:\n{apply_log}");
    let mirror_dirs: Vec<PathBuf> = (0..PARTITIONS).map(mirror_dir).collect();
    let verify = segmirror_verify(
        &mirror_dirs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
        &["--deep", "--strict"],
    )
    .unwrap();
    assert_eq!(verify.code, 0, "{verify}");
    drop(cluster);
    eprintln!("mirror verified after {:?}", started.elapsed());

    // Promote into a stopped target broker; its consumers read every acknowledged record exactly once, at the
    // source's offsets, and exactly what the source served.
    let mut target = KafkaBroker::start(BrokerConfig::new("e2e-tail-cluster-target")).unwrap();
    admin(
        &target.bootstrap(),
        &[TopicSpec::new(TOPIC, PARTITIONS).config("retention.ms", -1)],
        &[],
    )
    .unwrap();
    target.stop().unwrap();
    let promote = segmirror_promote(mirror.path(), target.log_dir(), &catalog, &["--json"]).unwrap();
    assert_eq!(promote.code, 0, "{promote}");
    let report = promote.json().unwrap();
    for p in report["partitions"].as_array().unwrap() {
        let partition = p["partition"].as_i64().unwrap() as i32;
        assert_eq!(
            p["log_end_offset"].as_i64(),
            high_watermarks.get(&partition).copied(),
            "{p}"
        );
    }
    let target_dirs: Vec<PathBuf> = (0..PARTITIONS).map(|p| target.partition_dir(TOPIC, p)).collect();
    let verify = segmirror_verify(
        &target_dirs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
        &["--deep", "--strict"],
    )
    .unwrap();
    assert_eq!(verify.code, 0, "{verify}");
    target.restart().unwrap();
    let target_records = consume_all(&target.bootstrap(), TOPIC, None, Isolation::ReadUncommitted).unwrap();
    let on_target = record_identities(&target_records);
    assert_eq!(
        on_target,
        record_identities(&source_records),
        "the target serves what the source served"
    );
    let mut seen = std::collections::BTreeSet::new();
    for r in &on_target {
        assert!(seen.insert((r.0, r.1)), "offset {}-{} twice", r.0, r.1);
    }
    let mut by_key: BTreeMap<&[u8], Vec<(i32, i64)>> = BTreeMap::new();
    for r in &target_records {
        by_key
            .entry(r.key.as_deref().unwrap_or_default())
            .or_default()
            .push((r.partition, r.offset));
    }
    for a in &acked {
        let at = by_key.get(a.key.as_deref().unwrap_or_default());
        assert_eq!(
            at.map(Vec::as_slice),
            Some(&[(a.partition, a.offset)][..]),
            "acknowledged record {:?} at {}-{}: exactly once, at its offset",
            String::from_utf8_lossy(a.key.as_deref().unwrap_or_default()),
            a.partition,
            a.offset
        );
    }
    target.stop().unwrap();
    eprintln!("done in {:?}", started.elapsed());
}
