//! The files at the root of a log directory, for partitions written with
//! [`PartitionWriter`](super::PartitionWriter).
//!
//! A broker decides how to load a log dir from these: `meta.properties` must
//! carry its cluster and node id; `recovery-point-offset-checkpoint`,
//! `log-start-offset-checkpoint` and `replication-offset-checkpoint` give each
//! partition's recovery point, log start offset and high watermark
//! (`cleaner-offset-checkpoint` exists, empty until the cleaner runs); and
//! `.kafka_cleanshutdown` tells it the shutdown was clean, so nothing is
//! recovered and every index is trusted as written. [`write_log_dir_files`]
//! writes what `LogManager.shutdown` and the ReplicaManager's checkpoint thread
//! leave behind, or, for [`LogDirState::Running`], what a live broker has (no
//! clean-shutdown marker, the `.lock` file present).

use std::fs;
use std::path::Path;

use super::WrittenPartition;
use crate::checkpoint::{MetaProperties, MetaPropertiesVersion, OffsetCheckpoint, OffsetCheckpointEntry};
use crate::dir::{
    CLEANER_OFFSET_CHECKPOINT_FILE, CLEAN_SHUTDOWN_FILE, LOCK_FILE, LOG_START_OFFSET_CHECKPOINT_FILE,
    META_PROPERTIES_FILE, RECOVERY_POINT_CHECKPOINT_FILE, REPLICATION_OFFSET_CHECKPOINT_FILE,
};
use crate::durable::write_atomically;
use crate::error::{Error, Result};
use crate::partition_metadata::Uuid;

/// Who owns the log dir: the `meta.properties` of a KRaft (version 1) broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogDirIdentity {
    /// `cluster.id` (Kafka makes it a random [`Uuid`] string).
    pub cluster_id: String,
    pub node_id: i32,
    /// `directory.id` (KIP-858).
    pub directory_id: Uuid,
}

impl LogDirIdentity {
    /// Fresh random cluster and directory ids, as `kafka-storage format` draws them.
    pub fn random(node_id: i32) -> std::io::Result<Self> {
        Ok(LogDirIdentity {
            cluster_id: Uuid::random()?.to_string(),
            node_id,
            directory_id: Uuid::random()?,
        })
    }

    pub fn meta_properties(&self) -> MetaProperties {
        MetaProperties {
            version: MetaPropertiesVersion::V1,
            cluster_id: Some(self.cluster_id.clone()),
            node_id: Some(self.node_id),
            directory_id: Some(self.directory_id),
        }
    }
}

/// How the broker left the log dir.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogDirState {
    /// After `LogManager.shutdown`: `.kafka_cleanshutdown` holds the broker epoch.
    CleanShutdown { broker_epoch: i64 },
    /// A live broker: no marker, `.lock` present.
    Running,
}

/// `CleanShutdownFileHandler.write`: Jackson's rendering of `Content`.
pub fn clean_shutdown_content(broker_epoch: i64) -> String {
    format!("{{\"version\":0,\"brokerEpoch\":{broker_epoch}}}")
}

fn checkpoint(partitions: &[&WrittenPartition], offset: impl Fn(&WrittenPartition) -> Option<i64>) -> OffsetCheckpoint {
    OffsetCheckpoint {
        entries: partitions
            .iter()
            .filter_map(|p| {
                offset(p).map(|offset| OffsetCheckpointEntry {
                    topic: p.topic.clone(),
                    partition: p.partition,
                    offset,
                })
            })
            .collect(),
    }
}

/// Write `meta.properties`, the three offset checkpoints and the state marker
/// into `log_dir` for `partitions` (all partitions of the dir: the checkpoints
/// are replaced, not merged). Entries are sorted by topic and partition.
/// `log-start-offset-checkpoint` lists only partitions whose log start offset is
/// above their first segment's base offset, as `LogManager` writes it.
pub fn write_log_dir_files(
    log_dir: &Path,
    identity: &LogDirIdentity,
    partitions: &[WrittenPartition],
    state: LogDirState,
) -> Result<()> {
    fs::create_dir_all(log_dir).map_err(|e| Error::io(log_dir, e))?;
    let mut sorted: Vec<&WrittenPartition> = partitions.iter().collect();
    sorted.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    identity.meta_properties().write(&log_dir.join(META_PROPERTIES_FILE))?;
    checkpoint(&sorted, |p| Some(p.recovery_point)).write(&log_dir.join(RECOVERY_POINT_CHECKPOINT_FILE))?;
    checkpoint(&sorted, |p| {
        (p.log_start_offset > p.first_segment_base_offset()).then_some(p.log_start_offset)
    })
    .write(&log_dir.join(LOG_START_OFFSET_CHECKPOINT_FILE))?;
    checkpoint(&sorted, |p| Some(p.high_watermark)).write(&log_dir.join(REPLICATION_OFFSET_CHECKPOINT_FILE))?;
    // `LogCleanerManager` creates its checkpoint empty at startup and writes it
    // only once the cleaner has cleaned something.
    let cleaner = log_dir.join(CLEANER_OFFSET_CHECKPOINT_FILE);
    if !cleaner.exists() {
        write_atomically(&cleaner, b"")?;
    }
    let marker = log_dir.join(CLEAN_SHUTDOWN_FILE);
    let lock = log_dir.join(LOCK_FILE);
    match state {
        LogDirState::CleanShutdown { broker_epoch } => {
            // `FileLock.destroy` deletes the lock file at shutdown.
            remove_if_present(&lock)?;
            write_atomically(&marker, clean_shutdown_content(broker_epoch).as_bytes())
        }
        LogDirState::Running => {
            remove_if_present(&marker)?;
            write_atomically(&lock, b"")
        }
    }
}

fn remove_if_present(path: &Path) -> Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(path, e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::writer::{PartitionWriter, WriterConfig};

    #[test]
    fn clean_shutdown_marker_is_jackson_json() {
        assert_eq!(clean_shutdown_content(42), r#"{"version":0,"brokerEpoch":42}"#);
    }

    #[test]
    fn writes_checkpoints_for_the_partitions() {
        let dir = tempfile::tempdir().unwrap();
        let config = WriterConfig {
            fsync: false,
            ..WriterConfig::default()
        };
        let mut parts = Vec::new();
        for (topic, p, base) in [("b", 1, 0), ("a", 0, 500)] {
            let mut w = PartitionWriter::create(dir.path(), topic, p, base, config.clone()).unwrap();
            for _ in 0..3 {
                w.append(crate::record::BatchBuilder::new(0).record(crate::record::RecordSpec::new(0, 5)))
                    .unwrap();
            }
            if topic == "a" {
                w.advance_log_start_offset(501).unwrap();
            }
            parts.push(w.close().unwrap());
        }
        let id = LogDirIdentity {
            cluster_id: "MkU3OEVBNTcwNTJENDM2Qg".into(),
            node_id: 3,
            directory_id: Uuid([7; 16]),
        };
        write_log_dir_files(dir.path(), &id, &parts, LogDirState::CleanShutdown { broker_epoch: 9 }).unwrap();
        let read = |name: &str| fs::read_to_string(dir.path().join(name)).unwrap();
        assert_eq!(read(RECOVERY_POINT_CHECKPOINT_FILE), "0\n2\na 0 503\nb 1 3\n");
        assert_eq!(read(LOG_START_OFFSET_CHECKPOINT_FILE), "0\n1\na 0 501\n");
        assert_eq!(read(REPLICATION_OFFSET_CHECKPOINT_FILE), "0\n2\na 0 503\nb 1 3\n");
        assert_eq!(read(CLEAN_SHUTDOWN_FILE), r#"{"version":0,"brokerEpoch":9}"#);
        assert!(!dir.path().join(LOCK_FILE).exists());
        assert_eq!(read(CLEANER_OFFSET_CHECKPOINT_FILE), "");
        let meta = MetaProperties::read(&dir.path().join(META_PROPERTIES_FILE)).unwrap();
        assert_eq!(meta, id.meta_properties());

        write_log_dir_files(dir.path(), &id, &parts, LogDirState::Running).unwrap();
        assert!(!dir.path().join(CLEAN_SHUTDOWN_FILE).exists());
        assert!(dir.path().join(LOCK_FILE).exists());
    }
}
