//! Step 2 of the install protocol: is the version what its manifest says, and may it join the partition? Its sizes
//! are judged plausible before a byte is downloaded ([`implausible_sizes`]); once staged, the verification engine
//! checks its files (every batch CRC, offsets inside `[base, next)`, the indexes, the transaction index), the
//! manifest's claims are compared with what the data shows, the producer snapshots must parse, and its leader
//! epochs must agree with its batches and merge with the installed ones ([`merged_checkpoint`]). Anything wrong is
//! a [`Refusal`]; nothing under the partition directory has changed yet.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

use segment_format::checkpoint::{leader_epoch_checkpoint_path, EpochEntry, LeaderEpochCheckpoint};
use segment_format::closed_log::SegmentClosing;
use segment_format::dir::{SegmentFileKind, SegmentFiles};
use segment_format::report::{Finding, Severity};
use segment_format::snapshot::ProducerSnapshot;
use segment_format::txn_ends::{TxnEnds, TxnEndsBuilder};
use segment_format::verify::{
    check_segment_observed, Depth, PartitionSummary, SegmentCheck, Strictness, TailPolicy, VerifyOptions,
};
use segmirror_transport::manifest::{EpochStart, Manifest};

use super::{Source, MAX_SNAPSHOT_BYTES};
use crate::error::{Error, Result};
use crate::report::{Refusal, MAX_REPORTED_FINDINGS};

/// The smallest frame a `.log` can hold: a magic-0 message with no key and no value (`LOG_OVERHEAD` 12 +
/// `RECORD_OVERHEAD_V0` 14). Bounds how many batches, hence index entries, a log of a given size can have.
const MIN_FRAME_BYTES: u64 = 26;

/// Refuse, before a byte is downloaded, a version whose index or snapshot sizes cannot be true. The verification
/// engine reads indexes whole and the snapshot is read whole, so a lie here would cost memory (and disk), not just
/// time. Kafka adds at most one offset-index and one time-index entry per append (plus the time index's closing
/// entry) and one transaction-index entry per abort marker, so no index outgrows its segment's batches, and no
/// batch is smaller than [`MIN_FRAME_BYTES`].
pub(super) fn implausible_sizes(m: &Manifest) -> Option<Refusal> {
    let log_size = m.file(SegmentFileKind::Log).map_or(0, |f| f.size);
    let max_entries = m.batches.min(log_size / MIN_FRAME_BYTES + 1);
    for (kind, entry_size, extra) in [
        (SegmentFileKind::Index, 8u64, 0u64),
        (SegmentFileKind::TimeIndex, 12, 1),
        (SegmentFileKind::TxnIndex, 34, 0),
    ] {
        if let Some(f) = m.file(kind) {
            let limit = entry_size.saturating_mul(max_entries.saturating_add(extra));
            if f.size > limit {
                return Some(Refusal::InvalidManifest {
                    reason: format!(
                        "{}: {} bytes is more than {} batches of a {log_size}-byte log can index ({limit} bytes)",
                        f.name, f.size, m.batches
                    ),
                });
            }
        }
    }
    m.file(SegmentFileKind::Snapshot)
        .into_iter()
        .chain(&m.end_snapshot)
        .find(|f| f.size > MAX_SNAPSHOT_BYTES)
        .map(|f| Refusal::InvalidManifest {
            reason: format!(
                "{} ({}): a producer snapshot of {} bytes exceeds the limit of {MAX_SNAPSHOT_BYTES}",
                f.name, f.key, f.size
            ),
        })
}

/// What a version that passed validation brings besides its files.
pub(super) struct Validated {
    /// The partition's new `leader-epoch-checkpoint`, when it changes.
    pub epochs: Option<LeaderEpochCheckpoint>,
    /// How the version's batches leave each transactional producer (`None`: too many producers to record).
    pub txn_ends: Option<TxnEnds>,
    /// Every marker of the version, for the segment's log (`crate::segment_log`).
    pub closings: Vec<SegmentClosing>,
}

/// Step 2: the verification engine on the version's files, the manifest's claims, the snapshot, the epochs.
pub(super) fn validate(
    m: &Manifest,
    manifest_key: &str,
    partition_dir: &Path,
    sources: &[Source],
    verify: &VerifyOptions,
) -> Result<std::result::Result<Validated, Refusal>> {
    let version = Version::new(m, manifest_key, sources);
    let mut txn_ends = TxnEndsBuilder::logging();
    let check = match version.check_data(verify, &mut txn_ends)? {
        Ok(check) => check,
        Err(refusal) => return Ok(Err(refusal)),
    };
    if let Some(refusal) = version.wrong_claim(&check.summary, verify.depth) {
        return Ok(Err(refusal));
    }
    if let Some(message) = epoch_disagreements(&check.epoch_findings) {
        return Ok(Err(Refusal::Epochs {
            message: format!("{manifest_key}: the manifest's leader epochs disagree with its batches: {message}"),
        }));
    }
    if let Some(refusal) = version.check_snapshots()? {
        return Ok(Err(refusal));
    }
    Ok(merged_checkpoint(m, partition_dir)?.map(|epochs| Validated {
        epochs,
        txn_ends: txn_ends.finish(),
        closings: txn_ends.take_log(),
    }))
}

/// A version's files as staged (or reused), and how a finding in them is named.
struct Version<'a> {
    m: &'a Manifest,
    manifest_key: &'a str,
    sources: &'a [Source],
    /// Staged paths by object key, so a report points at the bucket, not at a staging path.
    names: HashMap<PathBuf, PathBuf>,
}

impl<'a> Version<'a> {
    fn new(m: &'a Manifest, manifest_key: &'a str, sources: &'a [Source]) -> Self {
        let names = m
            .all_files()
            .zip(sources)
            .filter_map(|(f, s)| match s {
                Source::Fetch(p) => Some((p.clone(), PathBuf::from(&f.key))),
                Source::Reuse(_) => None,
            })
            .collect();
        Version {
            m,
            manifest_key,
            sources,
            names,
        }
    }

    /// Where the segment's file of `kind` is.
    fn path_of(&self, kind: SegmentFileKind) -> Option<PathBuf> {
        self.m
            .files
            .iter()
            .zip(self.sources)
            .find(|(f, _)| f.name.kind == kind)
            .map(|(_, s)| s.path().to_path_buf())
    }

    /// The refusal of a corrupt version: the first findings, named by object key, and how many more there were.
    fn corrupt(&self, findings: Vec<Finding>, suppressed: u64) -> Refusal {
        let total = findings.len() as u64 + suppressed;
        let kept: Vec<Finding> = findings
            .into_iter()
            .take(MAX_REPORTED_FINDINGS)
            .map(|mut finding| {
                if let Some(key) = self.names.get(&finding.path) {
                    finding.path = key.clone();
                }
                finding
            })
            .collect();
        Refusal::Corrupt {
            more: total - kept.len() as u64,
            findings: kept,
        }
    }

    /// The verification engine on the segment's files, with the manifest's leader epochs: the check when sound.
    /// Every batch it reads is also fed to `txn_ends` (in the same pass: the version is read once).
    fn check_data(
        &self,
        verify: &VerifyOptions,
        txn_ends: &mut TxnEndsBuilder,
    ) -> Result<std::result::Result<SegmentCheck, Refusal>> {
        let m = self.m;
        let (Some(log), Some(index), Some(time_index)) = (
            self.path_of(SegmentFileKind::Log),
            self.path_of(SegmentFileKind::Index),
            self.path_of(SegmentFileKind::TimeIndex),
        ) else {
            // `Manifest::validate` requires all three.
            return Ok(Err(Refusal::InvalidManifest {
                reason: format!("{} lacks a .log, .index or .timeindex", self.manifest_key),
            }));
        };
        let segment = SegmentFiles {
            base_offset: m.base_offset,
            log,
            index: Some(index),
            time_index: Some(time_index),
            txn_index: self.path_of(SegmentFileKind::TxnIndex),
        };
        // A shipped version ends at a complete batch: strict. An unsealed one is the source's active segment, whose
        // time index has no closing entry yet.
        let options = VerifyOptions {
            depth: verify.depth,
            strictness: Strictness::Strict,
        };
        // The manifest's leader epochs are checked against every magic-2 batch's `partitionLeaderEpoch` in the same
        // pass, as `verify` checks a partition against its `leader-epoch-checkpoint`: each batch carries the epoch in
        // force at its offset. A manifest without epochs (a source without a checkpoint) claims nothing to check.
        let claimed_epochs = (!m.epochs.is_empty()).then(|| {
            LeaderEpochCheckpoint::new(
                m.epochs
                    .iter()
                    .map(|e| EpochEntry {
                        epoch: e.epoch,
                        start_offset: e.start_offset,
                    })
                    .collect(),
            )
        });
        let check = match check_segment_observed(
            &segment,
            Some(m.next_offset),
            // An unsealed version is the source's active segment (preallocated indexes), cut at a complete batch.
            if m.sealed {
                TailPolicy::Sealed
            } else {
                TailPolicy::ActiveStrict
            },
            &options,
            claimed_epochs.as_ref(),
            &mut |frame| txn_ends.on_batch(&frame.info),
        ) {
            Ok(check) => check,
            Err(e) if e.is_corrupt() || e.is_incomplete() => {
                return Ok(Err(self.corrupt(vec![Finding::from_error(&e)], 0)))
            }
            Err(e) => return Err(Error::Format(e)),
        };
        if !check.is_sound() {
            let errors: Vec<Finding> = check.errors().cloned().collect();
            return Ok(Err(self.corrupt(errors, check.suppressed_findings)));
        }
        Ok(Ok(check))
    }

    /// The manifest's claims about its data (counts, offsets, size, time) against what the check found: the first
    /// one wrong. [`Depth::Deep`]: the check decompressed every batch, so its counts are exact.
    fn wrong_claim(&self, s: &PartitionSummary, depth: Depth) -> Option<Refusal> {
        let (m, manifest_key) = (self.m, self.manifest_key);
        let log_size = m.file(SegmentFileKind::Log).map_or(0, |f| f.size);
        // Without decompression a legacy (magic 0/1) compressed wrapper counts as one record at its last offset, so
        // a shallow check only bounds the record count from below and the first offset from above; a deep one (and
        // any magic-2 segment) gives the exact values the shipper recorded.
        let exact = depth == Depth::Deep;
        let first_offset_wrong = match (m.first_offset, s.first_offset) {
            (Some(claimed), Some(found)) => claimed > found || (exact && claimed != found),
            (claimed, found) => claimed != found,
        };
        let claims = [
            (
                "batches",
                m.batches.to_string(),
                s.batches.to_string(),
                m.batches != s.batches,
            ),
            (
                "records",
                m.records.to_string(),
                s.records.to_string(),
                m.records < s.records || (exact && m.records != s.records),
            ),
            (
                "first offset",
                format!("{:?}", m.first_offset),
                format!("{:?}", s.first_offset),
                first_offset_wrong,
            ),
            (
                "last offset",
                format!("{:?}", m.last_offset),
                format!("{:?}", s.last_offset),
                m.last_offset != s.last_offset,
            ),
            (
                "well-framed .log bytes",
                log_size.to_string(),
                s.bytes.to_string(),
                log_size != s.bytes,
            ),
        ];
        // An active-segment prefix ends right after its last batch (an empty one at its base); a sealed segment's next
        // is the following segment's base, which the chain checks.
        let next_from_data = s.last_offset.map_or(m.base_offset, |l| l.saturating_add(1));
        let claims = claims.into_iter().chain([
            (
                "max timestamp",
                m.max_timestamp.to_string(),
                s.max_timestamp.unwrap_or(-1).to_string(),
                m.max_timestamp != s.max_timestamp.unwrap_or(-1),
            ),
            (
                "next offset of an unsealed segment",
                m.next_offset.to_string(),
                next_from_data.to_string(),
                !m.sealed && m.next_offset != next_from_data,
            ),
        ]);
        claims
            .into_iter()
            .find(|claim| claim.3)
            .map(|(what, manifest, data, _)| Refusal::ManifestDataMismatch {
                what: format!("{what} (in {manifest_key})"),
                manifest,
                data,
            })
    }

    /// The base snapshot and the log-end one (the source after position `files.len()`) must parse.
    fn check_snapshots(&self) -> Result<Option<Refusal>> {
        let m = self.m;
        let end_snapshot = m
            .end_snapshot
            .as_ref()
            .and(self.sources.get(m.files.len()))
            .map(|s| s.path().to_path_buf());
        for snapshot in self.path_of(SegmentFileKind::Snapshot).into_iter().chain(end_snapshot) {
            let size = fs::metadata(&snapshot).map_err(|e| Error::io(&snapshot, e))?.len();
            if size > MAX_SNAPSHOT_BYTES {
                let name = self.names.get(&snapshot).unwrap_or(&snapshot);
                return Ok(Some(Refusal::InvalidManifest {
                    reason: format!(
                        "{}: producer snapshot of {size} bytes exceeds the limit of {MAX_SNAPSHOT_BYTES}",
                        name.display()
                    ),
                }));
            }
            match ProducerSnapshot::read(&snapshot) {
                Ok(_) => {}
                Err(e) if e.is_corrupt() || e.is_incomplete() => {
                    return Ok(Some(self.corrupt(vec![Finding::from_error(&e)], 0)))
                }
                Err(e) => return Err(Error::Format(e)),
            }
        }
        Ok(None)
    }
}

/// The partition's `leader-epoch-checkpoint` with the version's epochs merged in (`None`: unchanged), or the refusal
/// when they do not merge into increasing start offsets.
pub(crate) fn merged_checkpoint(
    m: &Manifest,
    partition_dir: &Path,
) -> Result<std::result::Result<Option<LeaderEpochCheckpoint>, Refusal>> {
    let checkpoint_path = leader_epoch_checkpoint_path(partition_dir);
    let existing = match fs::metadata(&checkpoint_path) {
        Ok(_) => LeaderEpochCheckpoint::read(&checkpoint_path)?.entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(Error::io(&checkpoint_path, e)),
    };
    let merged = merge_epochs(&existing, &m.epochs);
    let problems: Vec<String> = LeaderEpochCheckpoint::new(merged.clone())
        .check(&checkpoint_path)
        .into_iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| f.defect.to_string())
        .collect();
    if !problems.is_empty() {
        return Ok(Err(Refusal::Epochs {
            message: format!(
                "the installed epochs {} and this version's {} do not merge: {}",
                show_epochs(&existing),
                show_epochs(
                    &m.epochs
                        .iter()
                        .map(|e| EpochEntry {
                            epoch: e.epoch,
                            start_offset: e.start_offset
                        })
                        .collect::<Vec<_>>()
                ),
                problems.join("; ")
            ),
        }));
    }
    Ok(Ok((merged != existing).then(|| LeaderEpochCheckpoint::new(merged))))
}

/// The batches whose leader epoch disagrees with the manifest's, as one message (`None` when they all agree).
fn epoch_disagreements(findings: &[Finding]) -> Option<String> {
    (!findings.is_empty()).then(|| {
        findings
            .iter()
            .take(MAX_REPORTED_FINDINGS)
            .map(|f| match f.offset {
                Some(offset) => format!("at offset {offset}: {}", f.defect),
                None => f.defect.to_string(),
            })
            .collect::<Vec<_>>()
            .join("; ")
    })
}

fn show_epochs(entries: &[EpochEntry]) -> String {
    let parts: Vec<String> = entries
        .iter()
        .map(|e| format!("{}@{}", e.epoch, e.start_offset))
        .collect();
    format!("[{}]", parts.join(", "))
}

/// The leader epochs of the installed segments plus a version's: the union by epoch, keeping the earliest start
/// offset seen for an epoch (the source truncates the first entry's start to its log start offset as retention
/// advances, while the mirror may hold older data of that epoch). Sorted by epoch; whether the result is still
/// increasing in start offsets is for `LeaderEpochCheckpoint::check` to say.
pub(crate) fn merge_epochs(installed: &[EpochEntry], shipped: &[EpochStart]) -> Vec<EpochEntry> {
    let mut by_epoch: BTreeMap<i32, i64> = BTreeMap::new();
    let shipped = shipped.iter().map(|e| EpochEntry {
        epoch: e.epoch,
        start_offset: e.start_offset,
    });
    for e in installed.iter().copied().chain(shipped) {
        by_epoch
            .entry(e.epoch)
            .and_modify(|s| *s = (*s).min(e.start_offset))
            .or_insert(e.start_offset);
    }
    by_epoch
        .into_iter()
        .map(|(epoch, start_offset)| EpochEntry { epoch, start_offset })
        .collect()
}
