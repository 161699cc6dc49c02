//! scratch experiment (replaced below)

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use segment_format::checkpoint::{EpochEntry, LeaderEpochCheckpoint, OffsetCheckpoint, OffsetCheckpointEntry};
use segment_format::dir::{
    LEADER_EPOCH_CHECKPOINT_FILE, PARTITION_METADATA_FILE, RECOVERY_POINT_CHECKPOINT_FILE,
    REPLICATION_OFFSET_CHECKPOINT_FILE,
};
use segment_format::partition_metadata::{PartitionMetadata, Uuid};
use segmirror_tests::epoch_probe::{java_group_session, python_group_session, write_epoch_partition, GroupProbe};
use segmirror_tests::*;

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

fn merge_checkpoint(path: &Path, updates: &BTreeMap<(String, i32), i64>) {
    let mut cp = if path.exists() { OffsetCheckpoint::read(path).unwrap() } else { OffsetCheckpoint::default() };
    cp.entries.retain(|e| !updates.contains_key(&(e.topic.clone(), e.partition)));
    for ((topic, partition), offset) in updates {
        cp.entries.push(OffsetCheckpointEntry { topic: topic.clone(), partition: *partition, offset: *offset });
    }
    cp.write(path).unwrap();
}

fn restamp(dir: &Path, epoch: i32) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "log") {
            let mut bytes = std::fs::read(&p).unwrap();
            let mut pos = 0usize;
            while pos + 17 <= bytes.len() {
                let len = i32::from_be_bytes(bytes[pos + 8..pos + 12].try_into().unwrap()) as usize;
                assert_eq!(bytes[pos + 16], 2);
                bytes[pos + 12..pos + 16].copy_from_slice(&epoch.to_be_bytes());
                pos += 12 + len;
            }
            std::fs::write(&p, bytes).unwrap();
        }
    }
    LeaderEpochCheckpoint::new(vec![EpochEntry { epoch, start_offset: 0 }])
        .write(&dir.join(LEADER_EPOCH_CHECKPOINT_FILE))
        .unwrap();
}

#[test]
fn epoch_experiment() {
    let mut broker = KafkaBroker::start(BrokerConfig::new("epochs")).unwrap();
    let topics = ["epoch-raw", "epoch-restamped"];
    let specs: Vec<TopicSpec> = topics.iter().map(|t| TopicSpec::new(t, 1)).collect();
    let ids = admin(&broker.bootstrap(), &specs, &topics).unwrap();
    broker.stop().unwrap();
    let src = tempfile::tempdir().unwrap();
    let mut target_epochs = BTreeMap::new();
    let mut expected = BTreeMap::new();
    let mut leo = 0;
    for t in topics {
        let dst = broker.partition_dir(t, 0);
        let cache = LeaderEpochCheckpoint::read(&dst.join(LEADER_EPOCH_CHECKPOINT_FILE)).unwrap();
        eprintln!("target {t}: epoch cache {:?}", cache.entries);
        target_epochs.insert(t, cache.entries.last().map(|e| e.epoch).unwrap_or(0));
        let (w, recs) = write_epoch_partition(src.path(), t, 0, &[(3, 4), (7, 4)], now_ms() - 60_000).unwrap();
        leo = w.log_end_offset;
        expected.insert(t, recs);
        std::fs::remove_dir_all(&dst).unwrap();
        std::fs::create_dir(&dst).unwrap();
        for e in std::fs::read_dir(&w.dir).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
        }
        PartitionMetadata::new(Uuid::from_str(&ids[t].topic_id).unwrap()).write(&dst.join(PARTITION_METADATA_FILE)).unwrap();
        if t == "epoch-restamped" {
            restamp(&dst, target_epochs[t]);
        }
        let key = BTreeMap::from([((t.to_string(), 0), w.log_end_offset)]);
        merge_checkpoint(&broker.log_dir().join(RECOVERY_POINT_CHECKPOINT_FILE), &key);
        merge_checkpoint(&broker.log_dir().join(REPLICATION_OFFSET_CHECKPOINT_FILE), &key);
    }
    broker.restart().unwrap();
    let install = KafkaInstall::locate().unwrap();
    for t in topics {
        let got = consume_all(&broker.bootstrap(), t, None, Isolation::ReadCommitted).unwrap();
        eprintln!("{t}: consume_all {} records, equal={}", got.len(), got == expected[t]);
        for (client, group) in [("python", "g-py"), ("java", "g-java")] {
            for session in 0..2 {
                let probe = GroupProbe {
                    bootstrap: &broker.bootstrap(),
                    topic: t,
                    partition: 0,
                    group,
                    max_records: if session == 0 { 25 } else { 100 },
                    timeout: Duration::from_secs(20),
                    isolation: Isolation::ReadCommitted,
                };
                let s = if client == "python" { python_group_session(&probe) } else { java_group_session(install, &probe) }.unwrap();
                eprintln!(
                    "{t} {client} session {session}: before {:?} read {:?} end {} timeout {} errors {:?} after {:?} rewound {}\n  log: {:#?}",
                    s.committed_before, s.records, s.reached_end, s.timed_out, s.errors, s.committed_after, s.rewound(),
                    s.log.iter().take(30).collect::<Vec<_>>()
                );
            }
        }
    }
    eprintln!("leo {leo}");
    let tail = broker.log_tail(400);
    for l in tail.lines().filter(|l| l.contains("epoch") || l.contains("WARN")) {
        eprintln!("broker: {l}");
    }
    broker.stop().unwrap();
}
