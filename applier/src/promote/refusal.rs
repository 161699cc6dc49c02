//! Why a promotion will not start: every reason, each naming the partition or topic and the file that decided it.
//!
//! Kept apart from the promotion steps because the planning collects *all* of them in one run (an operator fixing
//! one reason at a time, rerunning in between, is what this avoids), and the CLI prints them as text or JSON.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use segment_format::dir::META_PROPERTIES_FILE;
use serde::Serialize;

use super::retention::loss::RetentionLoss;
use segment_format::TopicPartition;

/// Why a promotion will not start. Each names the partition or topic and the file that decided it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Refusal {
    /// The log dir's `.lock` is held: the broker is running.
    BrokerRunning { lock_file: PathBuf },
    /// The target has no `meta.properties`: not a formatted Kafka log dir.
    NotALogDir { log_dir: PathBuf },
    /// The same log dir was named twice (`--log-dir`): it would get the partitions twice.
    DuplicateLogDir { log_dir: PathBuf },
    /// The replicas' log dirs carry different topic ids for one partition (they are not one target cluster's
    /// replicas of one topic).
    ReplicaTopicIdsDiffer {
        partition: TopicPartition,
        ids: Vec<(PathBuf, String)>,
    },
    /// The catalog holds no link, or several and none was chosen.
    NoLink { links: Vec<String> },
    /// `--link` names a link the catalog does not hold.
    UnknownLink { link: String, links: Vec<String> },
    /// The mirror root does not exist (or is not a directory). Nothing is created.
    MirrorRootMissing { path: PathBuf },
    /// No partition of the link matches the topic selection.
    NothingSelected { link: String },
    /// `--handover rename` where the mirror root and the log dir are on different file systems (a rename cannot
    /// move a file between them).
    HandoverAcrossFileSystems { mirror_root: PathBuf, log_dir: PathBuf },
    /// The mirror has no directory for a partition the catalog records.
    MirrorPartitionMissing { partition: TopicPartition, path: PathBuf },
    /// The mirror directory holds a file an applier run leaves only when interrupted (or someone else put there).
    MirrorUnexpectedFile { partition: TopicPartition, path: PathBuf },
    /// Nothing is installed for the partition.
    NothingInstalled { partition: TopicPartition, path: PathBuf },
    /// Another applier (`apply`, `tail-apply`) holds the mirror's lock: it may be writing the partitions.
    MirrorBusy { lock_file: PathBuf, holder: String },
    /// A tailed partition's active segment is not the size its state file records durable (bytes beyond it were
    /// never acknowledged; fewer means acknowledged bytes were lost).
    TailActiveSizeMismatch {
        partition: TopicPartition,
        log: PathBuf,
        recorded: u64,
        on_disk: u64,
    },
    /// A tailed partition's state file cannot be read.
    TailStateUnreadable { partition: TopicPartition, reason: String },
    /// The mirror's log end offset is not what the catalog records as installed.
    MirrorCatalogMismatch {
        partition: TopicPartition,
        log: PathBuf,
        mirror_end_offset: i64,
        catalog_end_offset: Option<i64>,
    },
    /// The source's log start offset lies beyond what the mirror holds.
    LogStartBeyondEnd {
        partition: TopicPartition,
        log_start_offset: i64,
        log_end_offset: i64,
    },
    /// The mirror changed while a promotion was interrupted (the copy does not end where the plan said).
    MirrorChanged {
        partition: TopicPartition,
        log: PathBuf,
        planned_end_offset: i64,
        found_end_offset: i64,
    },
    /// The target log dir has no directory for the partition.
    TargetPartitionMissing { partition: TopicPartition, path: PathBuf },
    /// The target partition has no `partition.metadata` (so no topic id).
    TargetTopicIdMissing { partition: TopicPartition, path: PathBuf },
    /// The topic's partitions in the target log dir carry different topic ids.
    TargetTopicIdsDiffer { topic: String, ids: BTreeMap<i32, String> },
    /// The target topic has another number of partitions in this log dir than the mirror.
    PartitionCountMismatch {
        topic: String,
        mirror_partitions: usize,
        target_partitions: usize,
    },
    /// The target partition holds data (without `force`).
    TargetNotEmpty {
        partition: TopicPartition,
        log: PathBuf,
        size: u64,
    },
    /// The target's metadata log names another topic id for the topic than its partition directories carry: the
    /// broker would set the promoted directories aside as stray.
    TargetTopicIdDisagrees {
        topic: String,
        metadata_log: PathBuf,
        /// `None`: the metadata log has no such topic.
        metadata_topic_id: Option<String>,
        partition_topic_id: String,
    },
    /// `--target-config` cannot be read as a properties file.
    TargetConfigUnreadable { path: PathBuf, reason: String },
    /// The target topic's retention cannot be known (without `--allow-retention-delete`).
    RetentionUnknown { topic: String, reason: String },
    /// The target topic's retention would delete promoted data at the broker's first retention check (without
    /// `--allow-retention-delete`).
    RetentionWouldDelete(Box<RetentionLoss>),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NoLink { .. }
            | Refusal::UnknownLink { .. }
            | Refusal::MirrorRootMissing { .. }
            | Refusal::NothingSelected { .. }
            | Refusal::HandoverAcrossFileSystems { .. }
            | Refusal::DuplicateLogDir { .. } => self.fmt_selection(f),
            Refusal::MirrorPartitionMissing { .. }
            | Refusal::MirrorUnexpectedFile { .. }
            | Refusal::NothingInstalled { .. }
            | Refusal::MirrorBusy { .. }
            | Refusal::TailActiveSizeMismatch { .. }
            | Refusal::TailStateUnreadable { .. }
            | Refusal::MirrorCatalogMismatch { .. }
            | Refusal::LogStartBeyondEnd { .. }
            | Refusal::MirrorChanged { .. } => self.fmt_mirror(f),
            Refusal::BrokerRunning { .. }
            | Refusal::NotALogDir { .. }
            | Refusal::ReplicaTopicIdsDiffer { .. }
            | Refusal::TargetPartitionMissing { .. }
            | Refusal::TargetTopicIdMissing { .. }
            | Refusal::TargetTopicIdsDiffer { .. }
            | Refusal::PartitionCountMismatch { .. }
            | Refusal::TargetNotEmpty { .. }
            | Refusal::TargetTopicIdDisagrees { .. }
            | Refusal::TargetConfigUnreadable { .. }
            | Refusal::RetentionUnknown { .. }
            | Refusal::RetentionWouldDelete(..) => self.fmt_target(f),
        }
    }
}

impl Refusal {
    /// What was asked for: the link, the mirror root, the selection, the handover, the log dirs named.
    fn fmt_selection(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::DuplicateLogDir { log_dir } => write!(f, "log dir {} is named twice", log_dir.display()),
            Refusal::NoLink { links } if links.is_empty() => f.write_str("the catalog holds no link"),
            Refusal::NoLink { links } => write!(
                f,
                "the catalog holds several links ({}); choose one with --link",
                links.join(", ")
            ),
            Refusal::UnknownLink { link, links } => write!(
                f,
                "link {link:?} is not in the catalog (it holds: {})",
                if links.is_empty() {
                    "none".to_string()
                } else {
                    links.join(", ")
                }
            ),
            Refusal::MirrorRootMissing { path } => write!(
                f,
                "mirror root {} does not exist or is not a directory (give the --mirror of `segmirror apply`)",
                path.display()
            ),
            Refusal::HandoverAcrossFileSystems { mirror_root, log_dir } => write!(
                f,
                "--handover rename: mirror root {} and log dir {} are on different file systems (use --handover \
                 copy or auto)",
                mirror_root.display(),
                log_dir.display()
            ),
            Refusal::NothingSelected { link } => {
                write!(f, "no partition of link {link:?} matches the topic selection")
            }
            // Not of this group: `fmt` sends each variant to its own.
            other => write!(f, "{other:?}"),
        }
    }

    /// The mirror: its partitions, files, lock and state against the catalog.
    fn fmt_mirror(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::MirrorPartitionMissing { partition, path } => write!(
                f,
                "{partition}: the catalog records it, but the mirror has no {}",
                path.display()
            ),
            Refusal::MirrorUnexpectedFile { partition, path } => write!(
                f,
                "{partition}: unexpected file {} in the mirror (an interrupted apply? run `segmirror apply` first)",
                path.display()
            ),
            Refusal::NothingInstalled { partition, path } => {
                write!(f, "{partition}: nothing installed in {}", path.display())
            }
            Refusal::MirrorBusy { lock_file, holder } => write!(
                f,
                "{} is held by another applier ({holder}): stop `segmirror tail-apply`/`apply` on the mirror first",
                lock_file.display()
            ),
            Refusal::TailActiveSizeMismatch {
                partition,
                log,
                recorded,
                on_disk,
            } => write!(
                f,
                "{partition}: the tailed active segment {} holds {on_disk} bytes, its state file records {recorded}                  durable (restart `segmirror tail-apply` to put it back to the recorded size, then stop it)",
                log.display()
            ),
            Refusal::TailStateUnreadable { partition, reason } => {
                write!(f, "{partition}: tail state unreadable: {reason}")
            }
            Refusal::MirrorCatalogMismatch {
                partition,
                log,
                mirror_end_offset,
                catalog_end_offset,
            } => write!(
                f,
                "{partition}: the mirror ends at offset {mirror_end_offset} ({}), the catalog records {} installed \
                 (run `segmirror apply` to reconcile, with no applier running)",
                log.display(),
                catalog_end_offset.map_or_else(|| "nothing".to_string(), |o| format!("offset {o}"))
            ),
            Refusal::LogStartBeyondEnd {
                partition,
                log_start_offset,
                log_end_offset,
            } => write!(
                f,
                "{partition}: the source's log start offset {log_start_offset} lies beyond the mirror's end \
                 {log_end_offset} (apply has not caught up)"
            ),
            Refusal::MirrorChanged {
                partition,
                log,
                planned_end_offset,
                found_end_offset,
            } => write!(
                f,
                "{partition}: the mirror changed during an interrupted promotion: {} ends at offset \
                 {found_end_offset}, the journal planned {planned_end_offset}",
                log.display()
            ),
            // Not of this group: `fmt` sends each variant to its own.
            other => write!(f, "{other:?}"),
        }
    }

    /// The target: its log dirs, partitions, topic ids, metadata log, config and retention.
    fn fmt_target(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::BrokerRunning { lock_file } => write!(
                f,
                "{} is locked: the broker is running; stop it cleanly first",
                lock_file.display()
            ),
            Refusal::NotALogDir { log_dir } => write!(
                f,
                "{} has no {META_PROPERTIES_FILE}: not a formatted Kafka log dir",
                log_dir.display()
            ),
            Refusal::ReplicaTopicIdsDiffer { partition, ids } => write!(
                f,
                "{partition}: the replicas' log dirs carry different topic ids ({}); name the log dirs of one \
                 target cluster's brokers",
                ids.iter()
                    .map(|(dir, id)| format!("{}: {id}", dir.display()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Refusal::TargetPartitionMissing { partition, path } => write!(
                f,
                "{partition}: the target has no {} (create the topic with as many partitions on the target \
                 cluster, on this broker)",
                path.display()
            ),
            Refusal::TargetTopicIdMissing { partition, path } => write!(
                f,
                "{partition}: {} is missing, so the target topic id is unknown (start the target broker once \
                 after creating the topic)",
                path.display()
            ),
            Refusal::TargetTopicIdsDiffer { topic, ids } => write!(
                f,
                "topic {topic}: the target partitions carry different topic ids ({})",
                ids.iter()
                    .map(|(p, id)| format!("{p}: {id}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Refusal::PartitionCountMismatch {
                topic,
                mirror_partitions,
                target_partitions,
            } => write!(
                f,
                "topic {topic}: the mirror has {mirror_partitions} partitions, the target log dir \
                 {target_partitions}"
            ),
            Refusal::TargetNotEmpty { partition, log, size } => write!(
                f,
                "{partition}: the target partition holds data ({} is {size} bytes); use --force to replace it",
                log.display()
            ),
            Refusal::TargetTopicIdDisagrees {
                topic,
                metadata_log,
                metadata_topic_id,
                partition_topic_id,
            } => match metadata_topic_id {
                Some(id) => write!(
                    f,
                    "topic {topic}: the target's metadata log {} names topic id {id}, its partition directories \
                     carry {partition_topic_id} (the broker would set promoted data aside as stray; was the topic \
                     recreated while the broker was down?)",
                    metadata_log.display()
                ),
                None => write!(
                    f,
                    "topic {topic}: the target's metadata log {} has no such topic, though its partition directories \
                     (topic id {partition_topic_id}) exist (the broker would delete them as stray; was the topic \
                     deleted?)",
                    metadata_log.display()
                ),
            },
            Refusal::TargetConfigUnreadable { path, reason } => write!(
                f,
                "--target-config {}: {reason} (give the target broker's server.properties)",
                path.display()
            ),
            Refusal::RetentionUnknown { topic, reason } => write!(
                f,
                "topic {topic}: the target's retention is unknown ({reason}); give --target-config with the broker's \
                 server.properties, or --allow-retention-delete to promote without the check"
            ),
            Refusal::RetentionWouldDelete(loss) => write!(
                f,
                "{loss}; raise the target topic's retention.ms/retention.bytes first, or give \
                 --allow-retention-delete to promote anyway"
            ),
            // Not of this group: `fmt` sends each variant to its own.
            other => write!(f, "{other:?}"),
        }
    }
}

/// A list of refusals, displayed one per line.
pub struct Refusals<'a>(pub &'a [Refusal]);

impl fmt::Display for Refusals<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            [one] => write!(f, "{one}"),
            many => {
                write!(f, "{} reasons", many.len())?;
                for r in many {
                    write!(f, "\n  - {r}")?;
                }
                Ok(())
            }
        }
    }
}
