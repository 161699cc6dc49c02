//! What a failover needs to know about the source cluster, as plain data: its topics (partition count and the
//! topic-level configs it set explicitly) and its consumer groups' committed offsets.
//!
//! Why: the target side (`segmirror topics`, `segmirror offsets commit`) must not care where this came from — a
//! source broker's `__cluster_metadata-0` and `__consumer_offsets` dirs read from disk, a JSON file an operator
//! wrote, or (later) what a link shipped into the applier's catalog. These serde types are that one shape, and the
//! JSON file `--from FILE` reads (`{"topics": [...], "offsets": [...]}`, both optional).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::consumer_offsets::ConsumerOffsets;
use crate::error::Error;
use crate::metadata_log::ClusterMetadata;

/// Largest `--from` file read (64 MiB): a few hundred thousand topics or offsets; more is not such a file.
pub const MAX_SOURCE_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// One source topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceTopic {
    pub name: String,
    pub partitions: i32,
    /// Topic-level configs the source set explicitly (its `ConfigRecord`s); keys absent take the broker defaults.
    #[serde(default)]
    pub configs: BTreeMap<String, String>,
}

/// One committed offset of a source consumer group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceGroupOffset {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// The commit's metadata string (kept on the target).
    #[serde(default)]
    pub metadata: String,
}

/// The source cluster's state a failover uses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailoverSource {
    #[serde(default)]
    pub topics: Vec<SourceTopic>,
    #[serde(default)]
    pub offsets: Vec<SourceGroupOffset>,
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
            if t.partitions < 1 {
                return Err(Error::BadInput {
                    path: path.to_path_buf(),
                    reason: format!(
                        "topic {:?}: partitions must be at least 1, not {}",
                        t.name, t.partitions
                    ),
                });
            }
        }
        Ok(source)
    }

    /// The topics of a metadata log (internal topics left out: the target has its own).
    pub fn topics_from_metadata(metadata: &ClusterMetadata) -> Vec<SourceTopic> {
        metadata
            .topics
            .values()
            .filter(|t| !crate::dir::is_internal_topic(&t.name))
            .map(|t| SourceTopic {
                name: t.name.clone(),
                partitions: i32::try_from(t.partition_count()).unwrap_or(i32::MAX),
                configs: t.configs.clone(),
            })
            .collect()
    }

    /// The offsets of a `__consumer_offsets` replay.
    pub fn offsets_from_replay(state: &ConsumerOffsets) -> Vec<SourceGroupOffset> {
        state
            .offsets
            .iter()
            .map(|(k, v)| SourceGroupOffset {
                group: k.group.clone(),
                topic: k.topic.clone(),
                partition: k.partition,
                offset: v.offset,
                metadata: v.metadata.clone(),
            })
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
            topics: vec![SourceTopic {
                name: "orders".into(),
                partitions: 3,
                configs: [("retention.ms".to_string(), "1000".to_string())].into(),
            }],
            offsets: vec![SourceGroupOffset {
                group: "g".into(),
                topic: "orders".into(),
                partition: 2,
                offset: 17,
                metadata: String::new(),
            }],
        };
        std::fs::write(&path, serde_json::to_vec(&source).unwrap()).unwrap();
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
