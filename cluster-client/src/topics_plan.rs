//! What `segmirror topics plan|create|check` does with each source topic: create it on the target, or compare it
//! with the target's topic and list every difference.
//!
//! Why a difference is never accepted silently: a mirrored partition keeps its offsets only if the target has the
//! same partitions, and a config such as `cleanup.policy` or `retention.ms` decides whether the target deletes or
//! compacts what was installed. What is compared: the partition count, each topic-level config the source set
//! explicitly (against the target's effective value, whatever its source: a target default equal to the source's
//! override matches), and each topic-level override the target has that the source did not set (the source's
//! effective value is its broker default, which the metadata log does not hold, so it cannot be shown equal).

use std::collections::BTreeMap;

use segment_format::failover_source::TopicMeta;
use serde::Serialize;

use crate::admin::{TargetConfig, TargetTopic, SOURCE_TOPIC_CONFIG};

/// One difference between a source topic and the target's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    pub topic: String,
    /// `partitions`, or a config key.
    pub field: String,
    /// `None`: not set on the source (its broker default).
    pub source: Option<String>,
    /// `None`: absent or hidden (sensitive) on the target.
    pub target: Option<String>,
    pub note: String,
}

/// The verdict for one source topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Not on the target: to be created.
    Missing,
    /// Created by this run.
    Created,
    /// On the target, same partitions and configs.
    Matches,
    /// On the target, with differences.
    Differs,
    /// The target refused to create it or to describe its configs.
    Failed,
}

/// One source topic's line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TopicCheck {
    pub topic: String,
    pub verdict: Verdict,
    pub source_partitions: i32,
    pub target_partitions: Option<i32>,
    pub differences: Vec<Difference>,
    /// Why it failed ([`Verdict::Failed`]).
    pub error: Option<String>,
}

/// `DescribeConfigs` config source names (Kafka's `DescribeConfigsResponse.ConfigSource`).
fn source_name(source: i8) -> &'static str {
    match source {
        1 => "a topic override",
        2 => "a dynamic broker config",
        3 => "a dynamic cluster default",
        4 => "the broker's server.properties",
        5 => "Kafka's default",
        6 => "a dynamic broker logger config",
        7 => "a client metrics config",
        8 => "a group config",
        _ => "an unknown source",
    }
}

/// Compare `source` with the target's topic (`None`: missing) and its configs.
pub fn compare(
    source: &TopicMeta,
    target: Option<&TargetTopic>,
    configs: &BTreeMap<String, TargetConfig>,
) -> TopicCheck {
    let Some(target) = target else {
        return TopicCheck {
            topic: source.name.clone(),
            verdict: Verdict::Missing,
            source_partitions: source.partitions_i32(),
            target_partitions: None,
            differences: Vec::new(),
            error: None,
        };
    };
    let mut differences = Vec::new();
    let difference =
        |field: &str, source_value: Option<String>, target_value: Option<String>, note: String| Difference {
            topic: source.name.clone(),
            field: field.to_string(),
            source: source_value,
            target: target_value,
            note,
        };
    let source_partitions = source.partitions_i32();
    if target.partitions != source_partitions {
        differences.push(difference(
            "partitions",
            Some(source_partitions.to_string()),
            Some(target.partitions.to_string()),
            if target.partitions > source_partitions {
                "the target has more partitions: the extra ones receive nothing from the mirror".into()
            } else {
                "the target has fewer partitions: the mirror's other partitions have nowhere to go".into()
            },
        ));
    }
    for (key, value) in &source.configs {
        match configs.get(key) {
            None => differences.push(difference(
                key,
                Some(value.clone()),
                None,
                "the target does not know this config".into(),
            )),
            Some(t) if t.value.as_deref() == Some(value.as_str()) => {}
            Some(t) => differences.push(difference(
                key,
                Some(value.clone()),
                t.value.clone(),
                match t.value {
                    None => format!("hidden on the target (from {})", source_name(t.source)),
                    Some(_) => format!("the target's value comes from {}", source_name(t.source)),
                },
            )),
        }
    }
    for (key, t) in configs {
        if t.source == SOURCE_TOPIC_CONFIG && !source.configs.contains_key(key) {
            differences.push(difference(
                key,
                None,
                t.value.clone(),
                "set on the target only; the source uses its broker default".into(),
            ));
        }
    }
    TopicCheck {
        topic: source.name.clone(),
        verdict: if differences.is_empty() {
            Verdict::Matches
        } else {
            Verdict::Differs
        },
        source_partitions: source.partitions_i32(),
        target_partitions: Some(target.partitions),
        differences,
        error: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(partitions: u32, configs: &[(&str, &str)]) -> TopicMeta {
        TopicMeta {
            name: "orders".into(),
            topic_id: String::new(),
            partitions,
            configs: configs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        }
    }

    fn target_configs(entries: &[(&str, &str, i8)]) -> BTreeMap<String, TargetConfig> {
        entries
            .iter()
            .map(|(k, v, s)| {
                (
                    k.to_string(),
                    TargetConfig {
                        value: Some(v.to_string()),
                        source: *s,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn a_missing_topic_is_to_be_created() {
        let check = compare(&topic(3, &[]), None, &BTreeMap::new());
        assert_eq!(check.verdict, Verdict::Missing);
        assert_eq!(check.target_partitions, None);
    }

    #[test]
    fn equal_values_match_whatever_their_target_source() {
        let configs = target_configs(&[("retention.ms", "1000", 1), ("cleanup.policy", "delete", 5)]);
        let target = TargetTopic {
            partitions: 3,
            replication_factor: 1,
        };
        let check = compare(
            &topic(3, &[("retention.ms", "1000"), ("cleanup.policy", "delete")]),
            Some(&target),
            &configs,
        );
        assert_eq!(check.verdict, Verdict::Matches, "{check:?}");
    }

    #[test]
    fn every_difference_is_listed() {
        let configs = target_configs(&[
            ("retention.ms", "5000", 1),
            ("cleanup.policy", "delete", 5),
            ("max.message.bytes", "2000000", 1),
        ]);
        let target = TargetTopic {
            partitions: 2,
            replication_factor: 1,
        };
        let check = compare(
            &topic(
                3,
                &[
                    ("retention.ms", "1000"),
                    ("cleanup.policy", "compact"),
                    ("no.such.key", "1"),
                ],
            ),
            Some(&target),
            &configs,
        );
        assert_eq!(check.verdict, Verdict::Differs);
        let fields: Vec<(&str, Option<&str>, Option<&str>)> = check
            .differences
            .iter()
            .map(|d| (d.field.as_str(), d.source.as_deref(), d.target.as_deref()))
            .collect();
        assert_eq!(
            fields,
            [
                ("partitions", Some("3"), Some("2")),
                ("cleanup.policy", Some("compact"), Some("delete")),
                ("no.such.key", Some("1"), None),
                ("retention.ms", Some("1000"), Some("5000")),
                ("max.message.bytes", None, Some("2000000")),
            ]
        );
        assert!(
            check.differences[1].note.contains("Kafka's default"),
            "{:?}",
            check.differences[1]
        );
    }
}
