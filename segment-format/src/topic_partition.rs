//! The one name for "a topic and one of its partitions", shared by every crate of the workspace.
//!
//! Why here: segment-format is the bottom crate, and a partition is the unit everything else talks about (the
//! catalog's rows, the bucket's keys, the applier's plans, promotion's journal). One type with one `Display`
//! (`topic-partition`, Kafka's own directory name) keeps messages, journals and reports consistent, instead of
//! `(String, i32)` tuples and look-alike structs per crate. A partition *directory name* with a `-delete`/`-future`/
//! `-stray` suffix is another idea ([`crate::dir::PartitionDirName`]); a catalog row key adds the link.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::dir::{DirKind, PartitionDirName};

/// A partition of a topic, named the way Kafka names its log directory (`<topic>-<partition>`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    /// Kafka's directory name for the partition (`LocalLog.logDirName`): `<topic>-<partition>`.
    pub fn dir_name(&self) -> String {
        self.to_string()
    }

    /// Parse a live partition directory name (`<topic>-<partition>`, no `-delete`/`-future`/`-stray` suffix); the
    /// error is the reason, in words.
    pub fn parse_dir_name(name: &str) -> Result<Self, String> {
        let parsed = PartitionDirName::parse(name)?;
        if parsed.kind != DirKind::Normal {
            return Err(format!(
                "'{name}' is not a live partition directory (it has a {:?} suffix)",
                parsed.kind
            ));
        }
        Ok(TopicPartition::new(parsed.topic, parsed.partition))
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn displays_as_kafka_names_the_directory_and_parses_back() {
        let tp = TopicPartition::new("orders-eu", 12);
        assert_eq!(tp.to_string(), "orders-eu-12");
        assert_eq!(tp.dir_name(), "orders-eu-12");
        assert_eq!(TopicPartition::parse_dir_name("orders-eu-12"), Ok(tp));
        assert!(TopicPartition::parse_dir_name("orders").is_err());
        assert!(TopicPartition::parse_dir_name("orders-0.abc-delete").is_err());
    }
}
