//! What a failover needs to know about the source cluster, as plain data: its topics (partition count, the
//! topic-level configs it set explicitly, the topic id) and its consumer groups' committed offsets.
//!
//! Why one shape for every origin: the target side (`segmirror topics`, `segmirror offsets commit`, `segmirror
//! failover`) must not care where this came from — a source broker's `__cluster_metadata-0` and
//! `__consumer_offsets` dirs read from disk, a JSON file an operator wrote, or what a link shipped
//! (`segmirror_transport::bucket::link_meta`, which re-exports [`TopicMeta`] and [`GroupOffset`] as the entries of its
//! documents, and the applier's catalog). These serde types are that one shape. The JSON file `--from FILE` reads
//! is `{"topics": [...], "offsets": [...]}`, both optional, and in it the fields a person would not know (topic id,
//! leader epoch, commit timestamp, metadata, configs) may be left out; the shipped documents are validated
//! strictly (`TopicsDoc::validate`), so a default never passes for a shipped value.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::consumer_offsets::{CommittedOffset, ConsumerOffsets};
use crate::error::Error;
use crate::group_records::OffsetCommitKey;
use crate::metadata_log::{ClusterMetadata, TopicMetadata};

/// Largest `--from` file read (64 MiB): a few hundred thousand topics or offsets; more is not such a file.
pub const MAX_SOURCE_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// One source topic, as the source's metadata log last described it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicMeta {
    pub name: String,
    /// The source topic id, canonical text form (empty when an operator's file leaves it out).
    #[serde(default)]
    pub topic_id: String,
    /// Partitions `0..partitions`.
    pub partitions: u32,
    /// Topic-level config overrides the source set explicitly (its `ConfigRecord`s: `retention.ms`,
    /// `cleanup.policy`, ...); keys absent take the cluster's values.
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
}

impl TopicMeta {
    /// The topic as a metadata log describes it.
    pub fn from_metadata(t: &TopicMetadata) -> TopicMeta {
        TopicMeta {
            name: t.name.clone(),
            topic_id: t.topic_id.to_string(),
            partitions: u32::try_from(t.partition_count()).unwrap_or(u32::MAX),
            configs: t.configs.clone(),
        }
    }

    /// The partition count as Kafka's protocol carries it (int32).
    pub fn partitions_i32(&self) -> i32 {
        i32::try_from(self.partitions).unwrap_or(i32::MAX)
    }
}

/// One committed offset of a group, as the source's `__consumer_offsets` says. The leader epoch is informational
/// only: it must never be committed on another cluster (`docs/promotion.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupOffset {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    #[serde(default)]
    pub leader_epoch: Option<i32>,
    /// The commit's metadata string (kept on the target).
    #[serde(default)]
    pub metadata: String,
    #[serde(default)]
    pub commit_timestamp: i64,
}

impl GroupOffset {
    /// One entry of a `__consumer_offsets` replay (a negative offset or epoch, which no client sends, read as 0 and
    /// none).
    pub fn from_committed(key: &OffsetCommitKey, committed: &CommittedOffset) -> GroupOffset {
        GroupOffset {
            group: key.group.clone(),
            topic: key.topic.clone(),
            partition: key.partition,
            offset: committed.offset.max(0),
            leader_epoch: committed.leader_epoch.filter(|e| *e >= 0),
            metadata: committed.metadata.clone(),
            commit_timestamp: committed.commit_timestamp,
        }
    }
}

/// The source cluster's state a failover uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailoverSource {
    #[serde(default)]
    pub topics: Vec<TopicMeta>,
    #[serde(default)]
    pub offsets: Vec<GroupOffset>,
}

impl FailoverSource {
    /// Read a JSON file of this shape (at most [`MAX_SOURCE_FILE_BYTES`]); errors name the file and, for bad JSON,
    /// the line and column.
    pub fn read_json(path: &Path) -> Result<FailoverSource, Error> {
        let (file, meta) = crate::open::open_regular(path)?;
        if meta.len() > MAX_SOURCE_FILE_BYTES {
            return Err(crate::open::too_large(
                path,
                "failover source file",
                meta.len(),
                MAX_SOURCE_FILE_BYTES,
            ));
        }
        let source: FailoverSource =
            serde_json::from_reader(std::io::BufReader::new(file)).map_err(|e| Error::BadInput {
                path: path.to_path_buf(),
                reason: format!("not a failover source JSON file ({{\"topics\": [...], \"offsets\": [...]}}): {e}"),
            })?;
        for t in &source.topics {
            if t.partitions < 1 || t.partitions > i32::MAX as u32 {
                return Err(Error::BadInput {
                    path: path.to_path_buf(),
                    reason: format!(
                        "topic {:?}: partitions must be at least 1 (and an int32), not {}",
                        t.name, t.partitions
                    ),
                });
            }
        }
        Ok(source)
    }

    /// The topics of a metadata log (internal topics left out: the target has its own).
    pub fn topics_from_metadata(metadata: &ClusterMetadata) -> Vec<TopicMeta> {
        metadata
            .topics
            .values()
            .filter(|t| !crate::dir::is_internal_topic(&t.name))
            .map(TopicMeta::from_metadata)
            .collect()
    }

    /// The offsets of a `__consumer_offsets` replay.
    pub fn offsets_from_replay(state: &ConsumerOffsets) -> Vec<GroupOffset> {
        state
            .offsets
            .iter()
            .map(|(k, v)| GroupOffset::from_committed(k, v))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_file_reads_back_and_bad_ones_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("source.json");
        let source = FailoverSource {
            topics: vec![TopicMeta {
                name: "orders".into(),
                topic_id: String::new(),
                partitions: 3,
                configs: [("retention.ms".to_string(), "1000".to_string())].into(),
            }],
            offsets: vec![GroupOffset {
                group: "g".into(),
                topic: "orders".into(),
                partition: 2,
                offset: 17,
                leader_epoch: None,
                metadata: String::new(),
                commit_timestamp: 0,
            }],
        };
        std::fs::write(&path, serde_json::to_vec(&source).unwrap()).unwrap();
        assert_eq!(FailoverSource::read_json(&path).unwrap(), source);
        // What an operator writes: only the fields they know.
        std::fs::write(
            &path,
            r#"{"topics": [{"name": "orders", "partitions": 3, "configs": {"retention.ms": "1000"}}],
                "offsets": [{"group": "g", "topic": "orders", "partition": 2, "offset": 17}]}"#,
        )
        .unwrap();
        assert_eq!(FailoverSource::read_json(&path).unwrap(), source);
        std::fs::write(&path, r#"{"offsets": []}"#).unwrap();
        assert_eq!(FailoverSource::read_json(&path).unwrap(), FailoverSource::default());
        std::fs::write(&path, r#"{"topics": [{"name": "t", "partitions": 0}]}"#).unwrap();
        let e = FailoverSource::read_json(&path).unwrap_err().to_string();
        assert!(e.contains("source.json") && e.contains("at least 1"), "{e}");
        std::fs::write(&path, "{\"topics\": 5}").unwrap();
        let e = FailoverSource::read_json(&path).unwrap_err().to_string();
        assert!(e.contains("source.json") && e.contains("line 1"), "{e}");
    }
}
