//! The keys of the catalog's partition rows: the row id and the natural key `(link, topic, partition)`.
//!
//! Why a module of their own, importing nothing of the crate: the error type names them (which partition failed),
//! and so do events and segments; kept here, none of those modules has to import the partition table's code, and
//! the error cannot form a cycle with it.

use std::fmt;

use segment_format::TopicPartition;
use serde::Serialize;

/// Catalog row id of a mirror partition; stable for the life of the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct PartitionId(pub(crate) i64);

impl PartitionId {
    /// The raw row id.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for PartitionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The natural key of a mirror partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct PartitionKey {
    pub link: String,
    pub topic: String,
    pub partition: i32,
}

impl PartitionKey {
    pub fn new(link: impl Into<String>, topic: impl Into<String>, partition: i32) -> Self {
        PartitionKey {
            link: link.into(),
            topic: topic.into(),
            partition,
        }
    }

    /// The key of partition `tp` of `link`.
    pub fn of(link: impl Into<String>, tp: &TopicPartition) -> Self {
        PartitionKey::new(link, tp.topic.clone(), tp.partition)
    }

    /// The topic and partition, without the link (the workspace's one name for them).
    pub fn topic_partition(&self) -> TopicPartition {
        TopicPartition::new(self.topic.clone(), self.partition)
    }
}

impl fmt::Display for PartitionKey {
    /// `link/topic-partition`, the partition directory name prefixed by the link.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}-{}", self.link, self.topic, self.partition)
    }
}
