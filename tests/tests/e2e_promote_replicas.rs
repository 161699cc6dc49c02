//! Promotion into every replica of a replicated target topic: a mirror of `orders` (2
//! partitions, seeded and applied from one source broker) is promoted with one `segmirror promote --log-dir A
//! --log-dir B --log-dir C` into the three stopped nodes of a 3-node target cluster where `orders` has
//! replication factor 3. Before the nodes start, every replica's partition directory holds the same bytes and
//! `verify --deep --strict` finds nothing wrong in any. After they start: a consumer reads every source record at
//! its source offset; the leader of `orders-0` is killed and the new leader serves the same records; the killed
//! node comes back, an idempotent `acks=all` producer appends, and every node is in the ISR of both partitions
//! again (the replicas agree, or a follower would truncate or fall out of sync); the appended records follow the
//! promoted ones.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use segmirror_tests::clients::{record_identities, RecordIdentity};
use segmirror_tests::mirror::segmirror_promote;
use segmirror_tests::segmirror_cli::{run_segmirror, segmirror_verify};
use segmirror_tests::wait::wait_for;
use segmirror_tests::*;

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 2;
const PER_PARTITION: usize = 60;

fn records(from: usize, count: usize) -> Vec<OutRecord> {
    (0..PARTITIONS)
        .flat_map(|p| {
            (from..from + count).map(move |i| OutRecord {
                partition: Some(p),
                key: Some(format!("k{p}-{i}").into_bytes()),
                value: Some(format!("{TOPIC}-{p}-{i}").into_bytes()),
                headers: vec![],
                timestamp: None,
            })
        })
        .collect()
}

fn segmirror(args: &[&str]) {
    let run = run_segmirror(args).unwrap();
    assert_eq!(run.code, 0, "segmirror {}\n{run}", args.join(" "));
}

/// Every file of a directory, name -> bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_mirror_promoted_into_three_replicas_serves_the_same_records_from_every_leader() {
    let started = Instant::now();
    let mut source = KafkaBroker::start(BrokerConfig::new("replicas-source")).unwrap();
    admin(&source.bootstrap(), &[TopicSpec::new(TOPIC, PARTITIONS)], &[]).unwrap();
    python_produce(
        &source.bootstrap(),
        &ProducePlan::new(TOPIC).step(ProduceStep::Send(records(0, PER_PARTITION))),
    )
    .unwrap();
    let source_records = consume_all(&source.bootstrap(), TOPIC, None, Isolation::ReadUncommitted).unwrap();
    assert_eq!(source_records.len(), PER_PARTITION * PARTITIONS as usize);
    source.stop().unwrap();

    let work = tempfile::tempdir().unwrap();
    let (store, mirror, catalog) = (
        work.path().join("store"),
        work.path().join("mirror"),
        work.path().join("catalog.sqlite"),
    );
    std::fs::create_dir(&store).unwrap();
    let p = |p: &Path| p.display().to_string();
    segmirror(&[
        "seed",
        "--log-dir",
        &p(source.log_dir()),
        "--store",
        &p(&store),
        "--link",
        "r",
    ]);
    segmirror(&[
        "apply",
        "--store",
        &p(&store),
        "--mirror",
        &p(&mirror),
        "--catalog",
        &p(&catalog),
        "--link",
        "r",
    ]);
    drop(source);
    eprintln!("mirror applied after {:?}", started.elapsed());

    let mut cluster = KafkaCluster::start(ClusterConfig::new("replicas-target")).unwrap();
    cluster
        .create_topic(TOPIC, PARTITIONS, &[("retention.ms", "-1".to_string())])
        .unwrap();
    let ids = cluster.node_ids();
    let dirs: Vec<PathBuf> = ids
        .iter()
        .map(|id| cluster.node(*id).unwrap().log_dir().to_path_buf())
        .collect();
    // Every replica has created its partition directories (followers do so as the metadata reaches them).
    wait_for(
        "every replica's partition directories",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let all = dirs.iter().all(|d| {
                (0..PARTITIONS).all(|partition| {
                    d.join(format!("{TOPIC}-{partition}"))
                        .join("partition.metadata")
                        .is_file()
                })
            });
            Ok(all.then_some(()))
        },
    )
    .unwrap();
    cluster.stop_all().unwrap();
    eprintln!("target cluster up and stopped after {:?}", started.elapsed());

    let promote = segmirror_promote(
        &mirror,
        &dirs[0],
        &catalog,
        &["--log-dir", &p(&dirs[1]), "--log-dir", &p(&dirs[2]), "--json"],
    )
    .unwrap();
    assert_eq!(promote.code, 0, "{promote}");
    let report = promote.json().unwrap();
    let log_dirs: Vec<&str> = report["log_dirs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(log_dirs, ["installed"; 3], "{report}");
    for p in report["partitions"].as_array().unwrap() {
        assert_eq!(p["log_end_offset"].as_i64(), Some(PER_PARTITION as i64), "{p}");
        assert_eq!(p["log_dirs"].as_array().unwrap().len(), 3, "{p}");
    }
    // The same bytes in every replica, and nothing wrong in any.
    let mut partition_dirs = Vec::new();
    for partition in 0..PARTITIONS {
        let name = format!("{TOPIC}-{partition}");
        let first = files(&dirs[0].join(&name));
        assert!(first.keys().any(|f| f.ends_with(".log")), "{first:?}");
        for d in &dirs[1..] {
            assert!(
                files(&d.join(&name)) == first,
                "{} differs from {}",
                d.join(&name).display(),
                dirs[0].display()
            );
        }
        partition_dirs.extend(dirs.iter().map(|d| d.join(&name)));
    }
    let verify = segmirror_verify(
        &partition_dirs.iter().map(PathBuf::as_path).collect::<Vec<_>>(),
        &["--deep", "--strict"],
    )
    .unwrap();
    assert_eq!(verify.code, 0, "{verify}");
    // The catalog names every log dir each partition went into (`status`).
    let status = run_segmirror(["status", "--catalog", &p(&catalog), "--json"]).unwrap();
    assert_eq!(status.code, 0, "{status}");
    let status = status.json().unwrap();
    let mut expected_dirs: Vec<String> = dirs.iter().map(|d| p(d)).collect();
    expected_dirs.sort();
    for partition in status["links"][0]["partitions"].as_array().unwrap() {
        let mut into: Vec<String> = partition["promoted_into"]
            .as_array()
            .unwrap_or_else(|| panic!("no promoted_into: {partition}"))
            .iter()
            .map(|d| d.as_str().unwrap().to_string())
            .collect();
        into.sort();
        assert_eq!(into, expected_dirs, "{partition}");
    }

    cluster.restart_all().unwrap();
    eprintln!("target cluster restarted after {:?}", started.elapsed());
    let expected = record_identities(&source_records);
    let on_target = consume_all(&cluster.bootstrap(), TOPIC, None, Isolation::ReadUncommitted).unwrap();
    assert_eq!(
        record_identities(&on_target),
        expected,
        "the target serves the source's records at their offsets"
    );

    // The leader of orders-0 dies; the new leader serves the same records.
    let leader = cluster.partition(TOPIC, 0).unwrap().leader;
    cluster.kill(leader).unwrap();
    let new_leader = cluster.wait_for_new_leader(TOPIC, 0, leader).unwrap();
    let from_new = consume_all(&cluster.bootstrap(), TOPIC, Some(&[0]), Isolation::ReadUncommitted).unwrap();
    let expected_0: Vec<RecordIdentity> = expected.iter().filter(|r| r.0 == 0).cloned().collect();
    assert_eq!(
        record_identities(&from_new),
        expected_0,
        "node {new_leader}, the new leader of {TOPIC}-0"
    );

    // The old leader comes back; an idempotent acks=all producer appends; every replica is in sync.
    cluster.restart(leader).unwrap();
    python_produce(
        &cluster.bootstrap(),
        &ProducePlan::new(TOPIC)
            .config("acks", "all")
            .config("enable.idempotence", true)
            .step(ProduceStep::Send(records(PER_PARTITION, 10))),
    )
    .unwrap();
    for partition in 0..PARTITIONS {
        for id in &ids {
            cluster.wait_in_sync(TOPIC, partition, *id).unwrap();
        }
    }
    let after = consume_all(&cluster.bootstrap(), TOPIC, None, Isolation::ReadUncommitted).unwrap();
    let appended: Vec<RecordIdentity> = record_identities(&after)
        .into_iter()
        .filter(|r| r.1 >= PER_PARTITION as i64)
        .collect();
    assert_eq!(appended.len(), 10 * PARTITIONS as usize);
    assert!(
        appended.iter().all(|r| r.1 < PER_PARTITION as i64 + 10),
        "appended right after the promoted records"
    );
    let kept: Vec<RecordIdentity> = record_identities(&after)
        .into_iter()
        .filter(|r| r.1 < PER_PARTITION as i64)
        .collect();
    assert_eq!(kept, expected);
    drop(cluster);
    eprintln!("done in {:?}", started.elapsed());
}
