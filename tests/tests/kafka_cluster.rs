//! The 3-node source cluster of the harness ([`KafkaCluster`]): it starts, replicates a topic with replication
//! factor 3 byte for byte, survives the SIGKILL of a partition's leader (leadership moves, `acks=all` writes go
//! on with two in-sync replicas), and takes the node back. One cluster for all checks, small data.

use std::path::{Path, PathBuf};

use segmirror_shipper::source::leadership::{
    check_node, node_id_of_log_dir, LeadershipSource, MetadataLeadership, NodeCheck,
};
use segmirror_shipper::source::list_offsets::ListOffsetsConfig;
use segmirror_tests::broker::read_properties;
use segmirror_tests::wait::wait_for;
use segmirror_tests::*;

const TOPIC: &str = "replicated";

/// The leader epoch at which node `id` leads `TOPIC`-0 by segmirror's own `Metadata` client asking that node
/// (`None`: it does not lead it), once the first answer is in.
fn led_epoch_by_segmirror(rt: &tokio::runtime::Runtime, cluster: &KafkaCluster, id: i32) -> Option<i32> {
    let node = cluster.node(id).unwrap();
    assert_eq!(node_id_of_log_dir(node.log_dir()).unwrap(), id);
    assert_eq!(
        rt.block_on(check_node(&node.bootstrap(), id, std::time::Duration::from_secs(10)))
            .unwrap(),
        NodeCheck::Confirmed
    );
    let source = MetadataLeadership::spawn(
        rt.handle(),
        node.bootstrap(),
        id,
        std::time::Duration::from_millis(50),
        ListOffsetsConfig::default(),
    );
    wait_for(
        "a Metadata answer",
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(20),
        || Ok((source.answers() > 0).then_some(())),
    )
    .unwrap();
    source.led_epoch(TOPIC, 0)
}

/// The `.log` files of a partition directory, in offset order.
fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("log"))
        .collect();
    v.sort();
    v
}

/// All batches of a replica: its segments' bytes concatenated (segments hold whole batches, so replicas holding
/// the same batches give the same bytes wherever each rolled).
fn replica_bytes(dir: &Path) -> Vec<u8> {
    segment_files(dir)
        .iter()
        .flat_map(|f| std::fs::read(f).unwrap())
        .collect()
}

fn records(from: usize, n: usize) -> ProduceStep {
    ProduceStep::Send(
        (from..from + n)
            .map(|i| OutRecord {
                partition: Some(0),
                key: Some(format!("k{i}").into_bytes()),
                value: Some(format!("value {i} {}", "x".repeat(100)).into_bytes()),
                ..OutRecord::default()
            })
            .collect(),
    )
}

fn produce(cluster: &mut KafkaCluster, from: usize, n: usize) -> Vec<Record> {
    let plan = ProducePlan::new(TOPIC)
        .config("acks", "all")
        .config("enable.idempotence", "true")
        .config("linger.ms", 5)
        .config("batch.size", 4096)
        .step(records(from, n));
    python_produce(&cluster.bootstrap(), &plan).unwrap()
}

#[test]
fn three_node_cluster_replicates_and_moves_leadership_when_the_leader_is_killed() {
    let mut cluster = KafkaCluster::start(ClusterConfig::new("cluster")).unwrap();
    for id in cluster.node_ids() {
        let meta = read_properties(&cluster.node(id).unwrap().log_dir().join("meta.properties")).unwrap();
        assert_eq!(meta.get("node.id").map(String::as_str), Some(id.to_string().as_str()));
        assert_eq!(meta.get("cluster.id").map(String::as_str), Some(cluster.cluster_id()));
    }
    let segment_bytes = cluster.node(1).unwrap().install().segment_bytes_config();
    cluster
        .create_topic(TOPIC, 1, &[(segment_bytes, "16384".to_string())])
        .unwrap();
    let state = cluster.partition(TOPIC, 0).unwrap();
    assert_eq!(state.replicas.len(), 3, "{state:?}");
    let leader = state.leader;
    assert!(cluster.node_ids().contains(&leader), "{state:?}");

    // segmirror's Metadata view agrees with the Python client's: only the leader leads, at some epoch; a node's
    // bootstrap named with another node's id is refused.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut first_epoch = None;
    for id in cluster.node_ids() {
        let epoch = led_epoch_by_segmirror(&rt, &cluster, id);
        assert_eq!(epoch.is_some(), id == leader, "node {id}: {epoch:?}");
        first_epoch = first_epoch.or(epoch);
    }
    let other = cluster.node_ids().into_iter().find(|id| *id != leader).unwrap();
    let err = rt
        .block_on(check_node(
            &cluster.node(leader).unwrap().bootstrap(),
            other,
            std::time::Duration::from_secs(10),
        ))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!("is node {leader}")) && err.contains(&format!("node {other}")),
        "{err}"
    );

    let mut sent = produce(&mut cluster, 0, 300);
    assert_eq!(sent.last().map(|r| r.offset), Some(299));

    // The leader crashes: another in-sync replica leads, and acks=all writes go on with two replicas in sync.
    cluster.kill(leader).unwrap();
    let new_leader = cluster.wait_for_new_leader(TOPIC, 0, leader).unwrap();
    assert_ne!(new_leader, leader);
    let new_epoch = led_epoch_by_segmirror(&rt, &cluster, new_leader).expect("the new leader leads");
    assert!(new_epoch > first_epoch.unwrap(), "{new_epoch} after {first_epoch:?}");
    sent.extend(produce(&mut cluster, 300, 300));
    assert_eq!(
        sent.last().map(|r| r.offset),
        Some(599),
        "no offset skipped or reused across the failover"
    );

    // The killed node comes back, catches up from the new leader and rejoins the ISR.
    cluster.restart(leader).unwrap();
    cluster.check_all_running().unwrap();
    cluster.wait_in_sync(TOPIC, 0, leader).unwrap();

    // Every replica holds the same batches byte for byte (several segments each, small segments).
    let dirs: Vec<PathBuf> = cluster
        .node_ids()
        .into_iter()
        .map(|id| cluster.node(id).unwrap().partition_dir(TOPIC, 0))
        .collect();
    let expected = replica_bytes(&dirs[(new_leader - 1) as usize]);
    wait_for(
        "all replicas byte-identical",
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(200),
        || Ok(dirs.iter().all(|d| replica_bytes(d) == expected).then_some(())),
    )
    .unwrap();
    assert!(segment_files(&dirs[0]).len() > 2, "small segments roll several times");

    let consumed = consume_all(&cluster.bootstrap(), TOPIC, None, Isolation::ReadUncommitted).unwrap();
    assert_eq!(consumed.len(), 600);
    for (c, s) in consumed.iter().zip(&sent) {
        assert_eq!((c.offset, &c.key, &c.value), (s.offset, &s.key, &s.value));
    }
}
