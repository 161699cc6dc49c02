//! What a run did, partition by partition: the applier's answer to "what is installed now, and why not the rest?".
//!
//! Data the applier turns down is reported here as a [`Refusal`], with the manifest key and the reason, not raised
//! as an error: a corrupt segment in one partition must not stop the others, and an operator needs the precise
//! finding (file, position, offset) to act on it. A refused segment stops its partition at that point — installing
//! what follows would leave a hole the source never had. The types serialise to the JSON that
//! `segmirror apply --json` prints.

use std::fmt;
use std::path::PathBuf;

use segment_format::report::Finding;
use serde::Serialize;

/// What one run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ApplyReport {
    /// The link applied (`None` when the store held nothing to apply).
    pub link: Option<String>,
    /// Set when the whole link was skipped (paused or promoted in the catalog).
    pub link_skipped: Option<SkipReason>,
    pub partitions: Vec<PartitionReport>,
    /// Objects under the link that are not segmirror keys (ignored; a bucket may be shared).
    pub ignored_keys: Vec<IgnoredKey>,
    /// Whether a leftover staging directory of an interrupted run was removed.
    pub staging_cleared: bool,
    /// Things an operator should know that are not failures.
    pub notes: Vec<String>,
    /// What became of the link's metadata (topics, consumer offsets) this run; `None` when the bucket has none.
    pub link_meta: Option<LinkMetaOutcome>,
    /// Partitions a follower's run passed over, not in `partitions`: complete after an earlier run, and listed the
    /// same since (`bucket::quiet`).
    pub partitions_unchanged: usize,
}

/// The link's metadata at the end of a run ([`segmirror_transport::bucket::link_meta`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum LinkMetaOutcome {
    /// A newer version was checked and recorded in the catalog.
    Recorded {
        version: u64,
        topics: usize,
        offsets: usize,
    },
    /// The bucket's version is the one recorded already.
    Unchanged { version: u64 },
    /// The bucket's metadata was turned down (the error names the key and field) or could not be read; the
    /// catalog keeps the version it had, and the next run tries again.
    Refused { reason: String },
}

impl ApplyReport {
    /// Segment versions installed by this run.
    pub fn segments_installed(&self) -> usize {
        self.partitions.iter().map(|p| p.installed.len()).sum()
    }

    /// Bytes downloaded by this run.
    pub fn bytes_fetched(&self) -> u64 {
        self.partitions.iter().map(|p| p.bytes_fetched).sum()
    }

    /// Partitions that stopped at a refused segment.
    pub fn refusals(&self) -> impl Iterator<Item = (&PartitionReport, &RefusedSegment)> {
        self.partitions.iter().filter_map(|p| match &p.outcome {
            PartitionOutcome::Refused(r) => Some((p, r)),
            _ => None,
        })
    }

    /// Partitions that failed for a reason that is not the data's (I/O, store, catalog).
    pub fn failures(&self) -> impl Iterator<Item = (&PartitionReport, &str)> {
        self.partitions.iter().filter_map(|p| match &p.outcome {
            PartitionOutcome::Failed { error } => Some((p, error.as_str())),
            _ => None,
        })
    }

    /// The run's verdict, for an exit status: failures first, then refusals.
    pub fn verdict(&self) -> Verdict {
        if self.failures().next().is_some() {
            Verdict::Failed
        } else if self.refusals().next().is_some() {
            Verdict::Refused
        } else {
            Verdict::Ok
        }
    }
}

/// The overall result of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Everything shipped is installed, or waits for the shipper, or was skipped on purpose.
    Ok,
    /// At least one segment was refused (corrupt, lying or conflicting data).
    Refused,
    /// At least one partition could not be processed (store, catalog or local I/O).
    Failed,
}

/// One partition of the link.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionReport {
    pub topic: String,
    pub partition: i32,
    /// The lineage applied (the source topic id), once known.
    pub source_topic_id: Option<String>,
    pub outcome: PartitionOutcome,
    /// Versions installed by this run, in order.
    pub installed: Vec<InstalledSegment>,
    /// Manifests passed over on purpose (already installed, superseded, empty).
    pub skipped: Vec<SkippedSegment>,
    /// Files removed from the partition directory: segment files the catalog does not list as installed (an
    /// interrupted install whose version was not adopted) and leftover `*.tmp` files.
    pub removed: Vec<PathBuf>,
    pub bytes_fetched: u64,
    /// Bytes already on disk with the right SHA-256 (an interrupted install), not downloaded again.
    pub bytes_reused: u64,
}

impl PartitionReport {
    pub(crate) fn new(topic: &str, partition: i32) -> Self {
        PartitionReport {
            topic: topic.to_string(),
            partition,
            source_topic_id: None,
            outcome: PartitionOutcome::Complete,
            installed: Vec::new(),
            skipped: Vec::new(),
            removed: Vec::new(),
            bytes_fetched: 0,
            bytes_reused: 0,
        }
    }

    /// `topic-partition`.
    pub fn name(&self) -> String {
        format!("{}-{}", self.topic, self.partition)
    }
}

/// How a partition ended the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum PartitionOutcome {
    /// Every shipped version is installed.
    Complete,
    /// Installed up to a point; the rest waits for the shipper (see `reason`). Incomplete, not corrupt.
    Waiting { base_offset: i64, reason: String },
    /// Stopped at a segment the applier turned down.
    Refused(RefusedSegment),
    /// Not applied on purpose.
    Skipped { reason: SkipReason },
    /// Could not be processed (store, catalog or local I/O); a rerun continues where this one stopped.
    Failed { error: String },
}

/// Why a link or partition was not applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "why")]
pub enum SkipReason {
    /// The link is paused in the catalog.
    LinkPaused,
    /// The link is promoted: its mirror became a real cluster.
    LinkPromoted,
    /// The link is deleted (a tombstone in the catalog).
    LinkDeleted,
    /// The partition is paused in the catalog (a lineage break pauses it, too).
    Paused,
    /// The partition was promoted into a broker; the applier never writes it again.
    Promoted,
    /// The store holds a newer lineage (the source topic was recreated). Reported, never merged: the partition is
    /// paused until an operator starts the new lineage.
    LineageBreak { recorded: String, offered: String },
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::LinkPaused => f.write_str("link paused"),
            SkipReason::LinkPromoted => f.write_str("link promoted"),
            SkipReason::LinkDeleted => f.write_str("link deleted"),
            SkipReason::Paused => f.write_str("partition paused"),
            SkipReason::Promoted => f.write_str("partition promoted; never written again"),
            SkipReason::LineageBreak { recorded, offered } => write!(
                f,
                "lineage break: mirroring source topic id {recorded}, the store now holds {offered} \
                 (topic recreated); partition paused"
            ),
        }
    }
}

/// One version installed by this run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InstalledSegment {
    pub base_offset: i64,
    pub next_offset: i64,
    pub sealed: bool,
    /// Size of the `.log`.
    pub log_bytes: u64,
    /// `Some(previous next offset)` when a shorter version of the same segment was replaced.
    pub replaced: Option<i64>,
    /// Files taken from disk (an interrupted install) instead of the store.
    pub reused_files: u32,
    /// The catalog already listed this version (a rerun after a crash in the last step).
    pub already_recorded: bool,
    /// Bytes downloaded for this version.
    pub fetched_bytes: u64,
    /// Bytes of files found on disk with the right hashes.
    pub reused_bytes: u64,
}

/// A manifest passed over on purpose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedSegment {
    pub base_offset: i64,
    pub why: SkipSegment,
}

/// Why a manifest was passed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipSegment {
    /// This exact version is installed.
    AlreadyInstalled,
    /// Its offsets lie inside a segment installed (or installed by this run) at `by`: the source's cleaner merged
    /// it into that segment and the manifest is stale.
    Superseded { by: i64 },
    /// No batches: nothing to install (an active segment just rolled, or compaction emptied it).
    Empty,
    /// It ends before the first installed segment; a log cannot grow at its front.
    BeforeMirrorStart,
}

/// A segment version the applier turned down; its partition stops there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RefusedSegment {
    pub base_offset: i64,
    /// The manifest's key.
    pub manifest_key: String,
    pub refusal: Refusal,
}

/// Why a segment version was turned down.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Refusal {
    /// The manifest is malformed, lies about itself, sits at another key than its content says, names keys outside
    /// its own data folder, or names a data object that does not exist.
    InvalidManifest { reason: String },
    /// A downloaded object differs from what the manifest promised.
    Mismatch {
        key: String,
        what: String,
        expected: String,
        found: String,
    },
    /// The verification engine found defects in the staged segment (batch CRCs, offsets outside `[base, next)`,
    /// indexes, transaction index, producer snapshot). The error findings, at most [`MAX_REPORTED_FINDINGS`].
    Corrupt { findings: Vec<Finding>, more: u64 },
    /// The data is sound but does not match the manifest's description of it.
    ManifestDataMismatch {
        what: String,
        manifest: String,
        data: String,
    },
    /// The version's leader epochs contradict the ones already installed.
    Epochs { message: String },
    /// The version does not fit the installed history of the partition (see the catalog's ordering rule).
    Conflict { reason: String },
    /// The version starts above the mirror's end: offsets `[from, to)` are missing after the manifest `after`, and
    /// the manifest's log start offset does not prove that the source deleted them.
    Gap {
        from: i64,
        to: i64,
        after: String,
        log_start_offset: i64,
    },
}

/// Findings kept in a [`Refusal::Corrupt`]; the rest are counted.
pub const MAX_REPORTED_FINDINGS: usize = 20;

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::InvalidManifest { reason } => write!(f, "invalid manifest: {reason}"),
            Refusal::Mismatch {
                key,
                what,
                expected,
                found,
            } => write!(
                f,
                "{key}: {what} mismatch: manifest says {expected}, object has {found}"
            ),
            Refusal::Corrupt { findings, more } => {
                f.write_str("corrupt segment")?;
                for finding in findings {
                    write!(f, "; {finding}")?;
                }
                if *more > 0 {
                    write!(f, "; and {more} more")?;
                }
                Ok(())
            }
            Refusal::ManifestDataMismatch { what, manifest, data } => {
                write!(f, "manifest says {what} {manifest}, the segment has {data}")
            }
            Refusal::Epochs { message } => write!(f, "leader epochs: {message}"),
            Refusal::Conflict { reason } => write!(f, "conflicts with the installed segments: {reason}"),
            Refusal::Gap {
                from,
                to,
                after,
                log_start_offset,
            } => write!(
                f,
                "missing offsets [{from}, {to}) between {after} and this manifest (the source's log start offset \
                 {log_start_offset} does not cover them: a manifest is missing from the chain); nothing is installed \
                 past a hole"
            ),
        }
    }
}

/// An object key that is not part of the bucket contract.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IgnoredKey {
    pub key: String,
    pub reason: String,
}
