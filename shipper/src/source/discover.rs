//! Which partitions of the source log dirs are shipped: finding the partition
//! directories of a broker's log dirs and selecting them. Every driver (the
//! batch `seed`, a tail driver rescanning for new partitions) selects the same
//! way, so this knows nothing of what is done with a partition afterwards.
//!
//! The selection follows MirrorMaker 2's `topics` setting so an operator can
//! reuse the pattern they already have: a comma-separated list of topic names
//! and regular expressions, each matching a *whole* topic name
//! (`DefaultTopicFilter`: the list is joined with `|` and `Matcher.matches()` is
//! used; `ConfigDef` splits the list on commas with surrounding whitespace; an
//! empty list matches nothing). Rust's `regex` syntax is Java's for everything
//! a topic pattern normally uses; look-around and back-references do not
//! compile and are reported at start-up, never silently ignored.
//!
//! Some directories are never shipped whatever the pattern says:
//! - internal topics (`__consumer_offsets`, `__transaction_state`,
//!   `__cluster_metadata`, anything named `__*`): their contents belong to the
//!   source cluster's coordinators and mean nothing to another cluster;
//! - `-delete`, `-future` and `-stray` directories: they are not the live
//!   replica of their partition;
//! - partitions without a topic id in `partition.metadata`: without it there is
//!   no lineage, and a recreated topic could be merged with its predecessor.
//!
//! Each of these is reported, not silently dropped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use regex::Regex;
use segment_format::checkpoint::{MetaProperties, OffsetCheckpoint};
use segment_format::dir::{DirKind, LogDir, PartitionDir, RootCheckpoint};
use segment_format::partition_metadata::{PartitionMetadata, Uuid};
use segment_format::report::Finding;

use serde::Serialize;

use crate::error::{Error, Result};

/// The default topic pattern: every topic (internal ones are excluded anyway).
pub const ALL_TOPICS: &str = ".*";

/// A compiled `topics` pattern list (see the module doc).
#[derive(Debug, Clone)]
pub struct TopicFilter {
    list: String,
    /// `None` for an empty list, which matches nothing.
    regex: Option<Regex>,
}

/// `\s` of a Java regex: the whitespace `ConfigDef` trims around list entries.
fn is_java_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{b}' | '\u{c}' | '\r')
}

impl TopicFilter {
    /// Compile a comma-separated list of topic names and regular expressions.
    pub fn new(list: &str) -> Result<TopicFilter> {
        let trimmed = list.trim_matches(is_java_space);
        if trimmed.is_empty() {
            return Ok(TopicFilter {
                list: list.to_string(),
                regex: None,
            });
        }
        let joined = trimmed
            .split(',')
            .map(|entry| entry.trim_matches(is_java_space))
            .collect::<Vec<_>>()
            .join("|");
        let regex = Regex::new(&format!("^(?:{joined})$")).map_err(|e| Error::InvalidSetting {
            setting: "topics",
            reason: format!("'{list}' is not a list of regular expressions: {e}"),
        })?;
        Ok(TopicFilter {
            list: list.to_string(),
            regex: Some(regex),
        })
    }

    /// Every topic.
    pub fn all() -> TopicFilter {
        // The constant compiles.
        TopicFilter::new(ALL_TOPICS).unwrap_or(TopicFilter {
            list: String::new(),
            regex: None,
        })
    }

    /// The list as given.
    pub fn as_str(&self) -> &str {
        &self.list
    }

    /// Does the pattern select `topic`? (Internal topics are excluded elsewhere.)
    pub fn matches(&self, topic: &str) -> bool {
        self.regex.as_ref().is_some_and(|r| r.is_match(topic))
    }
}

/// Why a partition directory was not shipped although the pattern may select it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum SkipReason {
    /// An internal topic (`__*`): never shipped as data.
    Internal,
    /// A `-delete`, `-future` or `-stray` directory (`kind` says which).
    NotLive { kind: String },
    /// No `partition.metadata` (or the zero id): no lineage to ship under.
    NoTopicId,
}

impl std::fmt::Display for SkipReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SkipReason::Internal => f.write_str("internal topic, never shipped"),
            SkipReason::NotLive { kind } => write!(f, "-{kind} directory, not the live replica"),
            SkipReason::NoTopicId => f.write_str("no topic id in partition.metadata"),
        }
    }
}

/// A partition directory excluded by rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedPartition {
    /// The directory.
    pub path: PathBuf,
    /// Its topic, from the name.
    pub topic: String,
    /// Its partition, from the name.
    pub partition: i32,
    /// Why it is not shipped.
    pub reason: SkipReason,
}

/// A selected partition that cannot be shipped for a reason that needs an operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnusablePartition {
    /// Its topic.
    pub topic: String,
    /// Its partition.
    pub partition: i32,
    /// Its directory (the first, if it is in more than one log dir).
    pub path: PathBuf,
    /// What is wrong.
    pub problem: Unusable,
}

/// What is wrong with an [`UnusablePartition`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unusable {
    /// The directory cannot be read, or the partition is in two log dirs.
    Source(String),
    /// Its `partition.metadata` is corrupt: the findings.
    Corrupt(Vec<Finding>),
}

/// One partition to ship, as found at discovery.
#[derive(Debug, Clone)]
pub struct SourcePartition {
    /// Its topic.
    pub topic: String,
    /// Its partition.
    pub partition: i32,
    /// The partition directory.
    pub dir: PathBuf,
    /// The source cluster's id (from the log dir's `meta.properties`).
    pub cluster_id: String,
    /// The topic id (from `partition.metadata`).
    pub topic_id: Uuid,
    /// From the log dir's `log-start-offset-checkpoint`, if listed there.
    pub log_start_checkpoint: Option<i64>,
    /// `.log` bytes at discovery (for progress totals).
    pub log_bytes: u64,
    /// Segments at discovery.
    pub segments: u64,
}

/// What discovery found.
#[derive(Debug, Default)]
pub struct Discovery {
    /// Selected partitions, in (topic, partition) order.
    pub sources: Vec<SourcePartition>,
    /// Directories excluded by rule.
    pub skipped: Vec<SkippedPartition>,
    /// Selected partitions that cannot be shipped for a reason that needs an operator.
    pub failed: Vec<UnusablePartition>,
    /// Partitions the pattern does not select.
    pub not_selected: u64,
    /// Log dirs that could not be used at all.
    pub log_dir_errors: Vec<String>,
}

/// A partition directory that passed the name and pattern checks.
struct Candidate {
    topic: String,
    partition: i32,
    dir: PathBuf,
    cluster_id: String,
    log_start_checkpoint: Option<i64>,
}

/// Scan `log_dirs` and select what to ship. Blocking (directory listings and
/// small file reads). A log dir that cannot be read, or has no cluster id, is
/// reported and skipped; the others are still scanned.
pub fn discover(log_dirs: &[PathBuf], filter: &TopicFilter) -> Discovery {
    let mut out = Discovery::default();
    let mut candidates: BTreeMap<(String, i32), Vec<Candidate>> = BTreeMap::new();
    for path in log_dirs {
        let log_dir = match LogDir::open(path) {
            Ok(d) => d,
            Err(e) => {
                out.log_dir_errors.push(format!("cannot list log dir: {e}"));
                continue;
            }
        };
        let cluster_id = match cluster_id(&log_dir) {
            Ok(id) => id,
            Err(reason) => {
                out.log_dir_errors.push(format!("{}: {reason}", path.display()));
                continue;
            }
        };
        // By partition, once: a broker with retention or DeleteRecords lists most of its partitions there.
        let checkpoint = log_start_checkpoint(&log_dir).map(OffsetCheckpoint::into_offsets);
        for entry in &log_dir.partitions {
            let name = &entry.name;
            let skip = |reason| SkippedPartition {
                path: entry.path.clone(),
                topic: name.topic.clone(),
                partition: name.partition,
                reason,
            };
            if name.kind != DirKind::Normal {
                out.skipped.push(skip(SkipReason::NotLive {
                    kind: dir_kind_name(&name.kind).to_string(),
                }));
            } else if name.is_internal() {
                out.skipped.push(skip(SkipReason::Internal));
            } else if !filter.matches(&name.topic) {
                out.not_selected += 1;
            } else {
                candidates
                    .entry((name.topic.clone(), name.partition))
                    .or_default()
                    .push(Candidate {
                        topic: name.topic.clone(),
                        partition: name.partition,
                        dir: entry.path.clone(),
                        cluster_id: cluster_id.clone(),
                        log_start_checkpoint: checkpoint
                            .as_ref()
                            .and_then(|c| c.get(&(name.topic.clone(), name.partition)).copied()),
                    });
            }
        }
    }
    let mut steps = Vec::with_capacity(candidates.len());
    for ((topic, partition), mut found) in candidates {
        if found.len() > 1 {
            // `LogManager` refuses to start with the same partition in two log dirs.
            let dirs: Vec<String> = found.iter().map(|c| c.dir.display().to_string()).collect();
            steps.push(Step::Opened(Err(Box::new(UnusablePartition {
                path: found[0].dir.clone(),
                topic,
                partition,
                problem: Unusable::Source(format!(
                    "the partition is in more than one log dir ({}); a broker refuses to start like this",
                    dirs.join(", ")
                )),
            }))));
            continue;
        }
        if let Some(candidate) = found.pop() {
            steps.push(Step::Open(candidate));
        }
    }
    for opened in open_all(steps) {
        match opened {
            Ok(Ok(source)) => out.sources.push(source),
            Ok(Err(skipped)) => out.skipped.push(skipped),
            Err(unusable) => out.failed.push(*unusable),
        }
    }
    out
}

/// Partition directories opened at once. Opening one is a listing and a few small reads; from a cold cache each
/// waits for the disk, and one after another 200 partitions kept `seed` from starting for ~0.1 s.
const OPEN_THREADS: usize = 8;

/// What opening a candidate gives (see [`open_candidate`]).
type Opened = std::result::Result<std::result::Result<SourcePartition, SkippedPartition>, Box<UnusablePartition>>;

/// A partition of the selection, in (topic, partition) order: to be opened, or already decided.
enum Step {
    Open(Candidate),
    Opened(Opened),
}

impl Step {
    fn run(self) -> Opened {
        match self {
            Step::Open(candidate) => open_candidate(candidate),
            Step::Opened(opened) => opened,
        }
    }
}

/// Run `steps` on up to [`OPEN_THREADS`] threads, each taking a contiguous share; results in the order of `steps`.
/// A share whose thread cannot be started runs on this one (each share waits in a slot until one takes it, so a
/// failed start loses nothing).
fn open_all(steps: Vec<Step>) -> Vec<Opened> {
    let per_thread = steps.len().div_ceil(OPEN_THREADS).max(1);
    let mut slots: Vec<Mutex<Option<Vec<Step>>>> = Vec::new();
    let mut rest = steps.into_iter().peekable();
    while rest.peek().is_some() {
        slots.push(Mutex::new(Some(rest.by_ref().take(per_thread).collect())));
    }
    if slots.len() <= 1 {
        return slots.iter().flat_map(run_share).collect();
    }
    std::thread::scope(|scope| {
        let started: Vec<_> = slots
            .iter()
            .map(|slot| {
                std::thread::Builder::new()
                    .name("discover".into())
                    .spawn_scoped(scope, move || run_share(slot))
                    .map_err(|_| run_share(slot))
            })
            .collect();
        started
            .into_iter()
            .flat_map(|share| match share {
                Ok(thread) => thread.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(done_here) => done_here,
            })
            .collect()
    })
}

/// Take the share waiting in `slot` (once) and open it.
fn run_share(slot: &Mutex<Option<Vec<Step>>>) -> Vec<Opened> {
    let share = match slot.lock() {
        Ok(mut waiting) => waiting.take(),
        Err(poisoned) => poisoned.into_inner().take(),
    };
    share.unwrap_or_default().into_iter().map(Step::run).collect()
}

fn dir_kind_name(kind: &DirKind) -> &'static str {
    match kind {
        DirKind::Normal => "normal",
        DirKind::Delete { .. } => "delete",
        DirKind::Future { .. } => "future",
        DirKind::Stray { .. } => "stray",
    }
}

/// The source cluster id from `meta.properties`.
/// The cluster id of the log dir at `path` (its `meta.properties`): what a shipper that found no partition yet
/// names its source by. Blocking. The error is a sentence naming the path.
pub fn log_dir_cluster_id(path: &Path) -> std::result::Result<String, String> {
    let log_dir = LogDir::open(path).map_err(|e| format!("cannot list log dir: {e}"))?;
    cluster_id(&log_dir).map_err(|reason| format!("{}: {reason}", path.display()))
}

fn cluster_id(log_dir: &LogDir) -> std::result::Result<String, String> {
    let path = log_dir
        .meta_properties
        .as_ref()
        .ok_or("no meta.properties: the source cluster id is unknown (is this a Kafka log dir?)")?;
    let meta = MetaProperties::read(path).map_err(|e| e.to_string())?;
    meta.cluster_id
        .filter(|id| !id.is_empty())
        .ok_or_else(|| format!("{}: no cluster.id", path.display()))
}

/// The log dir's `log-start-offset-checkpoint`; unreadable counts as absent
/// (each partition then starts at its first segment, as a broker assumes).
fn log_start_checkpoint(log_dir: &LogDir) -> Option<OffsetCheckpoint> {
    let path = log_dir.checkpoint(RootCheckpoint::LogStartOffset)?;
    match OffsetCheckpoint::read(path) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(error = %e, "ignoring an unreadable log-start-offset-checkpoint");
            None
        }
    }
}

/// List the partition and read its topic id. `Ok(Err)`: skipped (no topic id);
/// `Err`: failed (unreadable or corrupt metadata).
fn open_candidate(c: Candidate) -> Opened {
    let unusable = |problem| {
        Box::new(UnusablePartition {
            topic: c.topic.clone(),
            partition: c.partition,
            path: c.dir.clone(),
            problem,
        })
    };
    let dir = PartitionDir::open(&c.dir).map_err(|e| unusable(Unusable::Source(e.to_string())))?;
    let no_id = || SkippedPartition {
        path: c.dir.clone(),
        topic: c.topic.clone(),
        partition: c.partition,
        reason: SkipReason::NoTopicId,
    };
    let Some(metadata) = &dir.partition_metadata else {
        return Ok(Err(no_id()));
    };
    let topic_id = match PartitionMetadata::read(metadata) {
        Ok(m) => m.topic_id,
        Err(e) => return Err(unusable(Unusable::Corrupt(vec![Finding::from_error(&e)]))),
    };
    if topic_id == Uuid::ZERO {
        return Ok(Err(no_id()));
    }
    let log_bytes = dir.segments.iter().map(|s| file_len(&s.log)).sum();
    Ok(Ok(SourcePartition {
        segments: dir.segments.len() as u64,
        log_bytes,
        topic: c.topic,
        partition: c.partition,
        dir: c.dir,
        cluster_id: c.cluster_id,
        topic_id,
        log_start_checkpoint: c.log_start_checkpoint,
    }))
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_whole_topic_names_like_mirror_maker() {
        let f = TopicFilter::new("orders.*, payments , audit-[0-9]+").unwrap();
        assert!(f.matches("orders"));
        assert!(f.matches("orders-eu"));
        assert!(f.matches("payments"));
        assert!(f.matches("audit-42"));
        assert!(!f.matches("audit-42x"), "full match, not a search");
        assert!(!f.matches("xorders"), "anchored at the start");
        assert!(!f.matches("payments2"));
        // An alternation inside one entry stays inside the anchors.
        let f = TopicFilter::new("a|b").unwrap();
        assert!(f.matches("a") && f.matches("b") && !f.matches("ab"));
        // `.` is a regex dot, as in Java.
        assert!(TopicFilter::new("a.c").unwrap().matches("abc"));
    }

    proptest::proptest! {
        #[test]
        fn any_list_compiles_or_fails_cleanly(list in "\\PC{0,40}") {
            let _ = TopicFilter::new(&list);
        }

        #[test]
        fn a_literal_topic_name_selects_itself_only(topic in "[a-zA-Z0-9_-]{1,30}") {
            let f = TopicFilter::new(&topic).unwrap();
            proptest::prop_assert!(f.matches(&topic));
            let longer = format!("{topic}x");
            proptest::prop_assert!(!f.matches(&longer));
        }
    }

    #[test]
    fn an_empty_list_matches_nothing() {
        for list in ["", "   ", "\t"] {
            let f = TopicFilter::new(list).unwrap();
            assert!(!f.matches("anything"), "{list:?}");
            assert!(!f.matches(""), "{list:?}");
        }
        assert!(TopicFilter::all().matches("t"));
    }

    #[test]
    fn a_bad_pattern_is_a_setting_error() {
        for bad in ["(", "a{2,1}", "(?<=x)y"] {
            match TopicFilter::new(bad) {
                Err(Error::InvalidSetting {
                    setting: "topics",
                    reason,
                }) => assert!(reason.contains(bad), "{reason}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
