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
//! - Empty versions (no batches) have nothing to install and are skipped.
//!
//! The catalog applies the same rule again when a version is marked installed ([`segmirror_catalog::Catalog::mark_installed`]);
//! planning with it first means nothing is downloaded that would be refused at the end.

use segment_format::dir::SegmentFileKind;
use segmirror_catalog::SegmentRecord;
use segmirror_transport::manifest::Manifest;

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
    /// Install this version; `replaces` is the installed version's next offset when it replaces one.
    Install {
        key: String,
        manifest: Box<Manifest>,
        replaces: Option<i64>,
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

/// The `.log` of a manifest: (size, sha256). Validation guarantees it exists.
fn log_of(m: &Manifest) -> Option<(u64, [u8; 32])> {
    m.file(SegmentFileKind::Log).map(|f| (f.size, f.sha256.0))
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
    // Ranges installed or planned, in order; the last one is the partition's tail.
    let mut ranges: Vec<Range> = installed
        .iter()
        .map(|s| Range {
            base: s.base_offset,
            next: s.next_offset,
            sealed: s.sealed,
            key: s.manifest_key.clone(),
        })
        .collect();
    let first_installed = installed.first().map(|s| s.base_offset);
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
        let step = next_step(installed, &ranges, first_installed, key, m);
        match &step {
            Step::Install {
                key,
                manifest,
                replaces,
            } => {
                if replaces.is_some() {
                    ranges.pop();
                }
                ranges.push(Range {
                    base: manifest.base_offset,
                    next: manifest.next_offset,
                    sealed: manifest.sealed,
                    key: key.clone(),
                });
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

/// A range installed or planned, with the manifest it comes from.
#[derive(Debug, Clone)]
struct Range {
    base: i64,
    next: i64,
    sealed: bool,
    key: String,
}

fn next_step(
    installed: &[Installed],
    ranges: &[Range],
    first_installed: Option<i64>,
    key: String,
    m: Box<Manifest>,
) -> Step {
    let base = m.base_offset;
    let tail = ranges.last().map(|r| (r.base, r.next, r.sealed));
    let empty = m.batches == 0;
    if let Some(v) = installed.iter().find(|s| s.base_offset == base) {
        let same_content = Some(v.next_offset) == Some(m.next_offset)
            && Some(v.last_offset) == m.last_offset
            && Some((v.size, v.sha256)) == log_of(&m);
        if same_content && (v.sealed || !m.sealed) {
            return Step::Skip {
                base_offset: base,
                why: SkipSegment::AlreadyInstalled,
            };
        }
        if v.sealed {
            return conflict(&key, &m, "the installed version is sealed and this one differs".into());
        }
        if m.next_offset < v.next_offset || empty {
            return conflict(
                &key,
                &m,
                format!(
                    "it ends at {} (with {} batches), before the installed version of the segment ({})",
                    m.next_offset, m.batches, v.next_offset
                ),
            );
        }
        if m.next_offset == v.next_offset && !same_content {
            return conflict(
                &key,
                &m,
                "it covers the same offsets as the installed version with other bytes".into(),
            );
        }
        if tail.map(|t| t.0) != Some(base) {
            return conflict(&key, &m, "it would grow a segment that already has a successor".into());
        }
        return Step::Install {
            key,
            manifest: m,
            replaces: Some(v.next_offset),
        };
    }
    if let Some((_, end, _)) = tail.filter(|t| base < t.1) {
        if first_installed.is_some_and(|first| m.next_offset <= first) {
            return Step::Skip {
                base_offset: base,
                why: SkipSegment::BeforeMirrorStart,
            };
        }
        if let Some(by) = ranges.iter().find(|r| r.base < base && m.next_offset <= r.next) {
            return Step::Skip {
                base_offset: base,
                why: SkipSegment::Superseded { by: by.base },
            };
        }
        return conflict(
            &key,
            &m,
            format!("[{base}, {}) overlaps what is installed up to {end}", m.next_offset),
        );
    }
    if let Some((tail_base, tail_next, false)) = tail {
        return Step::Wait {
            base_offset: tail_base,
            reason: format!(
                "segment {tail_base} was shipped while active (up to {tail_next}); its sealed version must be \
                 installed before segment {base}"
            ),
        };
    }
    if empty {
        return Step::Skip {
            base_offset: base,
            why: SkipSegment::Empty,
        };
    }
    if let Some(last) = ranges.last().filter(|r| r.next < base) {
        if m.log_start_offset < base {
            return Step::Refuse {
                key,
                base_offset: base,
                refusal: Refusal::Gap {
                    from: last.next,
                    to: base,
                    after: last.key.clone(),
                    log_start_offset: m.log_start_offset,
                },
            };
        }
    }
    Step::Install {
        key,
        manifest: m,
        replaces: None,
    }
}

#[cfg(test)]
mod tests;
