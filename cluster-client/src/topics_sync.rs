//! Bring the source's topics to the target cluster: describe the target, create what is missing (with the source's
//! partition count and configs) when asked, and compare every topic ([`crate::topics_plan::compare`]).
//!
//! Why here and not in the command: `segmirror topics` and `segmirror failover` both run exactly this, and a
//! failover must not create or accept topics by other rules than the command an operator runs by hand.

use std::collections::BTreeMap;
use std::time::Duration;

use segment_format::failover_source::TopicMeta;

use crate::admin::{AdminClient, NewTopic};
use crate::error::Result;
use crate::topics_plan::{compare, TopicCheck, Verdict};

/// What to do with the source's topics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicsMode {
    /// Describe and compare; a missing topic is to be created.
    Plan,
    /// Create the missing topics, then compare.
    Create,
    /// Compare; a missing topic is a mismatch.
    Check,
}

impl TopicsMode {
    /// Whether the checks leave the target usable for the mirror: nothing failed, and nothing differs (a topic
    /// missing counts as differing in `Check` mode) unless differences are allowed.
    pub fn acceptable(self, checks: &[TopicCheck], allow_differences: bool) -> bool {
        let failed = checks.iter().any(|c| c.verdict == Verdict::Failed);
        let differs = checks
            .iter()
            .any(|c| c.verdict == Verdict::Differs || (self == TopicsMode::Check && c.verdict == Verdict::Missing));
        !failed && (!differs || allow_differences)
    }
}

/// Describe the target, create what `mode` creates (replication factor: `replication_factor`, else the target's
/// default), wait up to `timeout` for created topics to show in the target's metadata, and compare each source
/// topic.
pub async fn sync_topics(
    admin: &mut AdminClient,
    mode: TopicsMode,
    source: &[TopicMeta],
    replication_factor: Option<i16>,
    timeout: Duration,
) -> Result<Vec<TopicCheck>> {
    let mut target = admin.topics().await?;
    let mut created: BTreeMap<String, Option<String>> = BTreeMap::new();
    if mode == TopicsMode::Create {
        let missing: Vec<NewTopic> = source
            .iter()
            .filter(|t| !target.contains_key(&t.name))
            .map(|t| NewTopic {
                name: t.name.clone(),
                partitions: t.partitions_i32(),
                replication_factor,
                configs: t.configs.clone(),
            })
            .collect();
        if !missing.is_empty() {
            for (name, result) in admin.create_topics(&missing).await? {
                created.insert(name, result.err().map(|e| e.to_string()));
            }
            // Metadata reaches every broker shortly after the controller commits it.
            let deadline = tokio::time::Instant::now() + timeout;
            loop {
                target = admin.topics().await?;
                let waiting = created.iter().any(|(n, e)| e.is_none() && !target.contains_key(n));
                if !waiting || tokio::time::Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let present: Vec<String> = source
        .iter()
        .filter(|t| target.contains_key(&t.name))
        .map(|t| t.name.clone())
        .collect();
    let configs = if present.is_empty() {
        BTreeMap::new()
    } else {
        admin.describe_topic_configs(&present).await?
    };
    let empty = BTreeMap::new();
    Ok(source
        .iter()
        .map(|t| {
            if let Some(Some(error)) = created.get(&t.name) {
                return failed(t, error.clone());
            }
            let described = match configs.get(&t.name) {
                Some(Err(e)) => return failed(t, e.to_string()),
                Some(Ok(c)) => c,
                None => &empty,
            };
            let mut check = compare(t, target.get(&t.name), described);
            if created.contains_key(&t.name) && check.verdict == Verdict::Matches {
                check.verdict = Verdict::Created;
            }
            check
        })
        .collect())
}

fn failed(t: &TopicMeta, error: String) -> TopicCheck {
    TopicCheck {
        topic: t.name.clone(),
        verdict: Verdict::Failed,
        source_partitions: t.partitions_i32(),
        target_partitions: None,
        differences: Vec::new(),
        error: Some(error),
    }
}
