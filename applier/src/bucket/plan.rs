//! The ordering rule: given what a partition has installed and the manifests of its lineage, what to do with each
//! manifest. One pure function ([`plan`]), so the rule can be read in one place and tested exhaustively, as neon
//! keeps its upload-queue ordering in one `can_bypass`.
//!
//! The rule follows from how Kafka treats a log: a segment's upper bound is the next segment's base offset, offsets
//! only grow, and a log never grows at its front.
//! - Manifests are taken in base-offset order. Each must start exactly at the end of what is installed (or planned
//!   before it): the chain `base_i == next_{i-1}`. Nothing legitimate leaves a hole in the middle of a log: the
//!   cleaner keeps a cleaned segment's base offset and the next segment still starts at the previous one's next,
//!   and retention deletes from the front only. So a version starting above the mirror's end is refused, naming the
//!   missing range, unless the mirror is empty (it may start anywhere) or the manifest proves a log-start move: the
//!   source's log start offset it carries is at or above its base, so every missing offset was deleted at the source
//!   before it was shipped (what the audit reports as a retention gap). A missing manifest in the middle of a chain
//!   is then a refusal, never a silent hole.
//! - The last installed segment may be replaced by a longer (or newly sealed) version of itself while it is not
//!   sealed; a sealed segment never changes, and nothing is installed after an unsealed one (its sealed version
//!   would then conflict). An unsealed segment followed by more manifests means the shipper has not re-shipped it
//!   sealed yet: the partition **waits** there (incomplete, not corrupt).
//! - A manifest that lies wholly inside an installed (or planned) segment is stale — the source's cleaner merged it
//!   into that segment — and is skipped; any other overlap is refused, as is every invalid manifest. A refusal
//!   stops the partition: installing what follows would leave a hole the source never had.
//! - Empty versions (no batches) have nothing to install and are skipped. One that follows the chain and is sealed
//!   still covers its `[base, next)`: the cleaner may empty a segment in the middle of the log (every record replaced
//!   by a later one with the same key), and the broker keeps the empty file at that base until a later pass merges
//!   it. The broker serves nothing from it, so nothing needs installing, but the next segment starts at its `next`,
//!   not at the chain's end: the plan counts the range as planned, and the install after it tells the catalog
//!   ([`Preceded::ByEmpty`]). On a later run such an empty version lies between installed segments, touching none
//!   of their offsets, and is skipped again.
//!
//! The rule itself is [`segmirror_transport::succession`]; `next_step` maps its verdict to a [`Step`].
//!
//! The catalog applies the same rule again when a version is marked installed ([`segmirror_catalog::Catalog::mark_installed`]);
//! planning with it first means nothing is downloaded that would be refused at the end.

use segmirror_catalog::{Preceded, SegmentRecord};
use segmirror_transport::manifest::Manifest;
use segmirror_transport::succession::{self, succession, Content, Verdict};

use crate::report::{Refusal, SkipSegment};

/// An installed segment version, as the catalog records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub base_offset: i64,
    pub next_offset: i64,
    pub last_offset: i64,
    /// Size and SHA-256 of the `.log`.
    pub size: u64,
    pub sha256: [u8; 32],
    pub sealed: bool,
    /// The manifest it was installed from (named when a gap follows it).
    pub manifest_key: String,
}

impl From<&SegmentRecord> for Installed {
    fn from(r: &SegmentRecord) -> Self {
        Installed {
            base_offset: r.version.base_offset,
            next_offset: r.version.next_offset,
            last_offset: r.version.last_offset,
            size: r.version.size,
            sha256: r.version.sha256,
            sealed: r.version.sealed,
            manifest_key: r.version.manifest_key.clone(),
        }
    }
}

/// One manifest of the lineage, as far as it was read.
#[derive(Debug, Clone)]
pub enum Candidate {
    /// Installed and sealed in the catalog: immutable, so not read again.
    Settled { base_offset: i64 },
    /// Read and valid.
    Read { key: String, manifest: Box<Manifest> },
    /// Read and turned down.
    Invalid {
        key: String,
        base_offset: i64,
        refusal: Refusal,
    },
}

impl Candidate {
    pub fn base_offset(&self) -> i64 {
        match self {
            Candidate::Settled { base_offset } | Candidate::Invalid { base_offset, .. } => *base_offset,
            Candidate::Read { manifest, .. } => manifest.base_offset,
        }
    }
}

/// What to do with one manifest.
#[derive(Debug, Clone)]
pub enum Step {
    /// Install this version; `replaces` is the installed version's next offset when it replaces one; `preceded`
    /// names the empty versions skipped just before it, which cover the offsets from the chain's end to its base.
    Install {
        key: String,
        manifest: Box<Manifest>,
        replaces: Option<i64>,
        preceded: Preceded,
    },
    /// Pass over it.
    Skip { base_offset: i64, why: SkipSegment },
    /// Turn it down; the partition stops here.
    Refuse {
        key: String,
        base_offset: i64,
        refusal: Refusal,
    },
    /// Stop here until the shipper ships more (the segment at `base_offset` is unsealed and has successors).
    Wait { base_offset: i64, reason: String },
}

fn conflict(key: &str, m: &Manifest, reason: String) -> Step {
    Step::Refuse {
        key: key.to_string(),
        base_offset: m.base_offset,
        refusal: Refusal::Conflict { reason },
    }
}

/// The rule of the module docs. `installed` in base-offset order; `candidates` are sorted here. The result has one
/// step per candidate up to and including the first `Refuse` or `Wait`, which ends it.
pub fn plan(installed: &[Installed], mut candidates: Vec<Candidate>) -> Vec<Step> {
    candidates.sort_by_key(Candidate::base_offset);
    // Ranges installed or planned, in order; the last one is the partition's tail, from the manifest `tail_key`.
    let mut ranges: Vec<succession::Version> = installed
        .iter()
        .map(|s| {
            succession::Version::new(
                s.base_offset,
                s.next_offset,
                s.sealed,
                Content {
                    log_size: s.size,
                    last_offset: Some(s.last_offset),
                    sha256: Some(s.sha256),
                },
            )
        })
        .collect();
    let mut tail_key = installed.last().map(|s| s.manifest_key.clone());
    // The base of the run of empty versions counted as planned since the last install, if any.
    let mut empty_from: Option<i64> = None;
    let mut steps = Vec::with_capacity(candidates.len());
    for candidate in candidates {
        let (key, m) = match candidate {
            Candidate::Settled { base_offset } => {
                steps.push(Step::Skip {
                    base_offset,
                    why: SkipSegment::AlreadyInstalled,
                });
                continue;
            }
            Candidate::Invalid {
                key,
                base_offset,
                refusal,
            } => {
                steps.push(Step::Refuse {
                    key,
                    base_offset,
                    refusal,
                });
                return steps;
            }
            Candidate::Read { key, manifest } => (key, manifest),
        };
        let mut covers = None;
        let mut step = next_step(&ranges, tail_key.as_deref(), key, m, &mut covers);
        if let Some(range) = covers {
            empty_from.get_or_insert(range.base_offset);
            ranges.push(range);
        }
        match &mut step {
            Step::Install {
                key,
                manifest,
                replaces,
                preceded,
            } => {
                if replaces.is_some() {
                    ranges.pop();
                } else if let Some(from) = empty_from {
                    *preceded = Preceded::ByEmpty { from };
                }
                empty_from = None;
                ranges.push(manifest.succession_version());
                tail_key = Some(key.clone());
            }
            Step::Skip { .. } => {}
            Step::Refuse { .. } | Step::Wait { .. } => {
                steps.push(step);
                return steps;
            }
        }
        steps.push(step);
    }
    steps
}

/// The step for one manifest: the succession rule's verdict against the installed and planned ranges, mapped.
/// `covers` is set to the range of an empty version that follows the chain and counts as planned (module docs).
fn next_step(
    ranges: &[succession::Version],
    tail_key: Option<&str>,
    key: String,
    m: Box<Manifest>,
    covers: &mut Option<succession::Version>,
) -> Step {
    let base = m.base_offset;
    let install = |m, replaces| Step::Install {
        key: key.clone(),
        manifest: m,
        replaces,
        preceded: Preceded::ByInstalled,
    };
    let skip = |why| Step::Skip { base_offset: base, why };
    let empty = m.batches == 0;
    match succession(ranges, &m.succession_version(), m.log_start_offset) {
        Verdict::Same => skip(SkipSegment::AlreadyInstalled),
        Verdict::Replaces { previous_next_offset } => install(m, Some(previous_next_offset)),
        Verdict::SealedGrown { .. }
        | Verdict::Truncated {
            previous_sealed: true, ..
        }
        | Verdict::Rewritten { previous_sealed: true } => {
            conflict(&key, &m, "the installed version is sealed and this one differs".into())
        }
        Verdict::Truncated {
            previous_next_offset, ..
        } => conflict(
            &key,
            &m,
            format!(
                "it ends at {} (with {} batches), before the installed version of the segment ({previous_next_offset})",
                m.next_offset, m.batches
            ),
        ),
        Verdict::Rewritten { .. } => conflict(
            &key,
            &m,
            "it covers the same offsets as the installed version with other bytes".into(),
        ),
        Verdict::GrowsUnderSuccessor { .. } => {
            conflict(&key, &m, "it would grow a segment that already has a successor".into())
        }
        Verdict::BeforeStart { .. } => skip(SkipSegment::BeforeMirrorStart),
        Verdict::Covered { by } => skip(SkipSegment::Superseded { by }),
        // An empty version between installed segments, touching none of their offsets: one an earlier run counted
        // as covered (it is never installed, so it comes back below the installed end).
        Verdict::Overlap { .. }
            if empty
                && !ranges
                    .iter()
                    .any(|r| r.base_offset < m.next_offset && base < r.next_offset) =>
        {
            skip(SkipSegment::Empty)
        }
        Verdict::Overlap { end } => conflict(
            &key,
            &m,
            format!("[{base}, {}) overlaps what is installed up to {end}", m.next_offset),
        ),
        Verdict::AwaitsSeal {
            tail_base, tail_next, ..
        } => Step::Wait {
            base_offset: tail_base,
            reason: format!(
                "segment {tail_base} was shipped while active (up to {tail_next}); its sealed version must be \
                 installed before segment {base}"
            ),
        },
        // Sealed and following the chain exactly: the next segment starts at its `next`.
        Verdict::Next if empty => {
            if m.sealed && m.next_offset > base {
                *covers = Some(m.succession_version());
            }
            skip(SkipSegment::Empty)
        }
        Verdict::First | Verdict::RetentionGap { .. } | Verdict::OffsetGap { .. } if empty => skip(SkipSegment::Empty),
        Verdict::OffsetGap { from, to } => Step::Refuse {
            key: key.clone(),
            base_offset: base,
            refusal: Refusal::Gap {
                from,
                to,
                after: tail_key.unwrap_or_default().to_string(),
                log_start_offset: m.log_start_offset,
            },
        },
        Verdict::First | Verdict::Next | Verdict::RetentionGap { .. } => install(m, None),
        // Not asked: the plan passes no lineage (one lineage per plan) and no leader epochs (checked per segment).
        Verdict::LineageBreak | Verdict::EpochRegression { .. } => conflict(
            &key,
            &m,
            "it does not follow the installed segments (lineage or leader epochs)".into(),
        ),
    }
}

#[cfg(test)]
mod tests;
