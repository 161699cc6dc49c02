//! The succession rule: how one segment version relates to the versions already there.
//!
//! # Why one function
//! A partition's log travels as a chain of segment versions `[base, next)`. Four places must judge whether a version
//! may follow what is already there: the shipper's resume (what the bucket holds for a base offset against what the
//! source has now), the applier's plan (manifests against what is installed or planned), the catalog's last check
//! before it records an install, and the bucket audit (each manifest against the one before it). They used to hold
//! four copies of the rule, and the copies drifted. [`succession`] is the rule, once; it returns a [`Verdict`] that
//! names the relationship, and each caller maps the verdict to its own action (the table at the end).
//! The function is pure: no I/O, no manifest or store types, just [`Version`]s.
//!
//! # The facts the rule follows from (Kafka's log)
//! - A segment's upper bound is the next segment's base offset; offsets only grow; a log never grows at its front.
//!   So consecutive versions chain exactly, `next_i == base_{i+1}`, however the offsets *inside* were compacted.
//! - Nothing legitimate leaves a hole in the middle of a log: the cleaner keeps a cleaned segment's base offset and
//!   the next segment still starts at the previous one's next; retention deletes from the front only. A hole is
//!   explained only by the source's log start offset having reached the later base (retention deleted the missing
//!   offsets before they were shipped).
//! - The active segment grows: the same base is shipped again with a larger `next` until a version is `sealed` (the
//!   source rolled past it); a sealed version never changes. A version that ends below what was shipped for its base
//!   means the source lost offsets (truncation); the same range with other bytes means it was rewritten.
//! - The cleaner may merge later segments into an earlier one (keeping the earlier base): a version lying wholly
//!   inside a newer version is stale.
//! - Leader epochs never go back along a log; a different topic id is a different log (the topic was recreated).
//!
//! # What the four copies decided (before this module), and where they disagreed
//! - **shipper `seed::plan::decide`** (one bucket version vs the source, same base; content = `.log` size only):
//!   nothing shipped → ship; shipped ends above the source → diverged (truncated), *even when the shipped one is
//!   sealed*; source longer → ship, *even over a sealed shipped version* (the cleaner merged segments into it; new
//!   keys, nothing overwritten); same range and shipped sealed → skip whatever the source's size (in-place
//!   compaction of a sealed segment is not re-shipped); same range, shipped unsealed, source sealed → seal *even
//!   with another size*; both unsealed → skip if the size is equal, else diverged (rewritten).
//! - **applier `plan::next_step`** (a manifest vs installed + planned ranges; content = next, last offset, `.log`
//!   size and SHA-256): same base → skip if the same bytes and not newly sealed, refuse if the installed one is
//!   sealed (whatever the change), refuse if shorter or empty, refuse same range with other bytes, refuse growing a
//!   segment that has a successor, else replace. New base inside the chain → skip if it ends before the first
//!   installed segment, skip if a planned/installed range covers it (no commit-time check), else refuse (overlap).
//!   After the end: wait if the tail is unsealed (gap or not), skip empty versions (a sealed one that starts at
//!   the chain's end covers its range: compaction emptied it, and the version after it is installed as
//!   following it, `catalog::Preceded::ByEmpty`), refuse a hole unless the manifest's own log start offset reaches
//!   its base; an empty mirror starts anywhere.
//! - **catalog `segment::fit`** (an offered version vs the installed rows): same base → same as the applier
//!   (sealed → `SealedChanged`, shorter → `Shrinks`, same range other bytes → `Diverged`, growing under a successor
//!   → `Overlap`); any new base below the installed end → `Overlap` (no stale/before-start skips: the caller never
//!   offers those); a hole → `Gap` only for an install, unless the partition's recorded log start reaches the base;
//!   *an unsealed tail does not stop a new segment* at its end (the applier waits there).
//! - **audit `check_chain`** (each valid manifest vs the previous one of its lineage): overlap → stale
//!   (`SupersededManifest`) only if the previous manifest covers it *and was committed later*, else `OffsetOverlap`;
//!   a hole after an unsealed manifest → `UnshippedTail`; after a sealed one → `RetentionGap` if the highest log
//!   start of the lineage reaches the base, else `OffsetGap`; leader epochs going back → `EpochRegression`, checked
//!   *in addition* to any offset finding.
//!
//! The rule below keeps every behaviour those copies' tests assert; where they disagreed:
//! - Stale versions: a covering version must be newer when both commit times are known (the audit's evidence);
//!   callers without commit times (the applier's installed rows) keep skipping on containment alone.
//! - A hole is a [`Verdict::OffsetGap`] unless the log start offset the caller knows reaches the base — the same
//!   test in all three copies; each caller passes the best log start it has (manifest, catalog row, lineage max).
//! - An unsealed tail followed by a new base is [`Verdict::AwaitsSeal`], carrying any hole: the applier waits, the
//!   audit warns of an unshipped tail when there is a hole, the catalog accepts exactly what it accepted before (no
//!   hole, or a hole the log start proves) — never a silent gap.
//! - Leader epochs: checked only where the offsets would otherwise be accepted (a version that overlaps or leaves an
//!   unexplained hole is already refused; one verdict names one relationship), so the audit reports an epoch
//!   regression beside an overlap or offset gap no more — the offset finding alone marks that key as an error.
//!
//! # What each caller does with a verdict
//! "—" marks a verdict the caller cannot receive (it passes no lineage or epochs, or one version of the same base).
//!
//! | verdict | shipper (`seed::plan`) | applier plan | catalog `mark_installed` | audit |
//! |---|---|---|---|---|
//! | `LineageBreak` | — (diverged) | — (refuse) | — (checked on load) | — (lineages kept apart) |
//! | `First` | ship (nothing shipped) | install (empty: skip) | new | — |
//! | `Same` | skip | skip, installed | already installed | — (overlap) |
//! | `Replaces` | seal if same `next`, else ship | install, replacing | replaced | — (overlap) |
//! | `GrowsUnderSuccessor` | — | refuse: has a successor | `Overlap` | — (overlap) |
//! | `SealedGrown` | ship (new keys) | refuse: sealed changed | `SealedChanged` | — (overlap) |
//! | `Truncated` | diverged: truncated | refuse (sealed: sealed changed) | `Shrinks` (sealed: `SealedChanged`) | — (overlap) |
//! | `Rewritten` | sealed there: skip; source sealed: seal; else diverged: rewritten | refuse (sealed: sealed changed) | `Diverged` (sealed: `SealedChanged`) | — (overlap) |
//! | `BeforeStart` | — | skip, before mirror start | `Overlap` | `OffsetOverlap` |
//! | `Covered` | — | skip, superseded | `Overlap` | `SupersededManifest` |
//! | `Overlap` | — | refuse: overlap | `Overlap` | `OffsetOverlap` |
//! | `Next` | — | install (empty: skip) | new | — |
//! | `AwaitsSeal` | — | wait | new, unless an unexplained hole (`Gap`, installs only) | hole: `UnshippedTail` |
//! | `RetentionGap` | — | install (empty: skip) | new | `RetentionGap` |
//! | `OffsetGap` | — | refuse: gap (empty: skip) | `Gap` (installs only; pending rows may run ahead) | `OffsetGap` |
//! | `EpochRegression` | — | — (refuse) | — (`Diverged`) | `EpochRegression` |

/// The content of a version, as far as its holder can tell. Two versions with the same range hold the same bytes
/// when their contents are equal: a caller that only knows the size (the shipper, before hashing the source) passes
/// `None` for what it does not know, on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Content {
    /// Bytes of the `.log` (for an active segment: up to the last complete batch).
    pub log_size: u64,
    /// Last offset of the last batch (`None`: no batches, or not known).
    pub last_offset: Option<i64>,
    /// SHA-256 of the `.log` (`None`: not known).
    pub sha256: Option<[u8; 32]>,
}

impl Content {
    /// Content known by its size only.
    pub fn of_size(log_size: u64) -> Self {
        Content {
            log_size,
            last_offset: None,
            sha256: None,
        }
    }
}

/// The leader epochs a version spans: the one in force at its base and the last one starting inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EpochSpan {
    pub first: i32,
    pub last: i32,
}

/// A segment version, as far as the rule needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Version {
    /// The segment's base offset (its file name).
    pub base_offset: i64,
    /// Exclusive end of the offsets it holds (`== base_offset`: an empty version).
    pub next_offset: i64,
    /// The source rolled past it: final.
    pub sealed: bool,
    pub content: Content,
    /// The log it belongs to (a source topic id and partition, as the caller keys them). `None`: the caller keeps
    /// lineages apart itself.
    pub lineage: Option<u128>,
    /// `None`: not known, not checked.
    pub epochs: Option<EpochSpan>,
    /// When the version was committed (ms since the epoch). `None`: not known.
    pub committed_at_ms: Option<i64>,
}

impl Version {
    /// A version with no lineage, epochs or commit time (those checks are then left out).
    pub fn new(base_offset: i64, next_offset: i64, sealed: bool, content: Content) -> Self {
        Version {
            base_offset,
            next_offset,
            sealed,
            content,
            lineage: None,
            epochs: None,
            committed_at_ms: None,
        }
    }
}

/// Why offsets are missing between the end of the chain and a new version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GapKind {
    /// The source's log start offset reached the new base: retention deleted `[from, to)` before it was shipped.
    Retention,
    /// Nothing explains it: offsets the source had are missing (data loss if accepted).
    Offsets,
}

/// Offsets `[from, to)` missing between the end of the chain and a new version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Gap {
    pub from: i64,
    pub to: i64,
    pub kind: GapKind,
}

/// How an offered version relates to the chain already there. One verdict names one relationship; see
/// [`succession`] for the order in which they are tested.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    // ---- Another log.
    /// The offered version belongs to another lineage than the chain (the topic was recreated under the same
    /// name): its offsets say nothing about the chain's; the two logs must never be merged.
    LineageBreak,

    // ---- The chain is empty.
    /// Nothing is there yet: the version may start anywhere (a mirror starts at the source's log start offset of
    /// the time). The data is new.
    First,

    // ---- A version with the same base offset is there.
    /// The same range with the same bytes (and not newly sealed): nothing to do.
    Same,
    /// The version there is unsealed and is the chain's last; the offered one is longer, or the same bytes now
    /// sealed. The data: a longer prefix of the same segment (or the final word on it) replaces the shorter one;
    /// the offsets `[base, previous_next_offset)` are kept, only more follow.
    Replaces { previous_next_offset: i64 },
    /// Like [`Verdict::Replaces`], but the version there already has a successor: growing it would overlap the
    /// successor.
    GrowsUnderSuccessor { previous_next_offset: i64 },
    /// The version there is sealed and the offered one is longer: the source's cleaner merged later segments into
    /// this one (it keeps the base offset). New data under a final segment's name: whoever has the sealed version
    /// keeps it.
    SealedGrown { previous_next_offset: i64 },
    /// The offered version ends below the one there: the source lost offsets that were already taken (unclean
    /// leader election, replica reset). Never overwrite what was taken.
    Truncated {
        previous_next_offset: i64,
        previous_sealed: bool,
    },
    /// The same range with other bytes: rewritten at the source (truncated and rewritten, or a sealed segment
    /// compacted in place). The two versions cannot both be right copies of one log unless the one there is
    /// sealed and the change is compaction.
    Rewritten { previous_sealed: bool },

    // ---- A new base offset below the chain's end.
    /// It ends at or before the chain's first base: older than anything there (the chain starts later).
    BeforeStart { first_base_offset: i64 },
    /// It lies wholly inside a newer version at base `by` (the cleaner merged it there): stale, its data is
    /// already there.
    Covered { by: i64 },
    /// Any other overlap with the chain (which ends at `end`): two versions claim the same offsets.
    Overlap { end: i64 },

    // ---- A new base offset at or after the chain's end.
    /// It starts exactly at the end of a sealed chain: the next segment.
    Next,
    /// The chain ends in an unsealed version (`[tail_base, tail_next)`, shipped while active): its sealed version
    /// may still grow to cover what follows, so the chain is incomplete there, not corrupt. `gap` is the hole
    /// between them, if any, and what explains it.
    AwaitsSeal {
        tail_base: i64,
        tail_next: i64,
        gap: Option<Gap>,
    },
    /// It starts after the end of a sealed chain, and the log start offset reaches its base: retention deleted
    /// `[from, to)` at the source before it was shipped. Nothing the source still had is missing.
    RetentionGap { from: i64, to: i64 },
    /// It starts after the end of a sealed chain and nothing explains `[from, to)`: offsets the source had are
    /// missing. Accepting it would be silent data loss.
    OffsetGap { from: i64, to: i64 },
    /// It would follow the chain, but its first leader epoch is below the chain's last: the log went back in
    /// leader epochs, which Kafka never does along one log.
    EpochRegression { last_epoch: i32, first_epoch: i32 },
}

/// The rule (see the module docs).
///
/// `chain`: the versions already there, in base-offset order and not overlapping (what is installed or planned,
/// what the bucket holds for a base, or the previous manifest); at most one per base. `log_start_offset`: the
/// highest log start offset of the source the caller knows (0 if none). The verdicts are tested in this order:
/// lineage; empty chain; a version at the same base; a base below the chain's end; then, after the end: an
/// unexplained hole after a sealed tail, leader epochs, an unsealed tail, a hole retention explains, the next one.
pub fn succession(chain: &[Version], offered: &Version, log_start_offset: i64) -> Verdict {
    if let Some(lineage) = offered.lineage {
        if chain.iter().any(|v| v.lineage.is_some_and(|l| l != lineage)) {
            return Verdict::LineageBreak;
        }
    }
    let (Some(first), Some(tail)) = (chain.first(), chain.last()) else {
        return Verdict::First;
    };
    if let Some(at) = chain.iter().position(|v| v.base_offset == offered.base_offset) {
        return same_base(&chain[at], at + 1 == chain.len(), offered);
    }
    let base = offered.base_offset;
    let end = tail.next_offset;
    if base < end {
        if offered.next_offset <= first.base_offset {
            return Verdict::BeforeStart {
                first_base_offset: first.base_offset,
            };
        }
        let covering = chain.iter().find(|v| {
            v.base_offset < base
                && offered.next_offset <= v.next_offset
                && match (v.committed_at_ms, offered.committed_at_ms) {
                    (Some(there), Some(new)) => there > new,
                    _ => true,
                }
        });
        return match covering {
            Some(v) => Verdict::Covered { by: v.base_offset },
            None => Verdict::Overlap { end },
        };
    }
    let gap = (base > end).then_some(Gap {
        from: end,
        to: base,
        kind: if log_start_offset >= base {
            GapKind::Retention
        } else {
            GapKind::Offsets
        },
    });
    if let Some(Gap {
        from,
        to,
        kind: GapKind::Offsets,
    }) = gap.filter(|_| tail.sealed)
    {
        return Verdict::OffsetGap { from, to };
    }
    if let (Some(there), Some(new)) = (tail.epochs, offered.epochs) {
        if new.first < there.last {
            return Verdict::EpochRegression {
                last_epoch: there.last,
                first_epoch: new.first,
            };
        }
    }
    if !tail.sealed {
        return Verdict::AwaitsSeal {
            tail_base: tail.base_offset,
            tail_next: end,
            gap,
        };
    }
    match gap {
        Some(Gap { from, to, .. }) => Verdict::RetentionGap { from, to },
        None => Verdict::Next,
    }
}

/// The offered version has the same base as `there`; `is_tail`: `there` is the chain's last.
fn same_base(there: &Version, is_tail: bool, offered: &Version) -> Verdict {
    let previous_next_offset = there.next_offset;
    if offered.next_offset < previous_next_offset {
        return Verdict::Truncated {
            previous_next_offset,
            previous_sealed: there.sealed,
        };
    }
    if offered.next_offset == previous_next_offset {
        if offered.content != there.content {
            return Verdict::Rewritten {
                previous_sealed: there.sealed,
            };
        }
        if there.sealed || !offered.sealed {
            return Verdict::Same;
        }
    } else if there.sealed {
        return Verdict::SealedGrown { previous_next_offset };
    }
    if is_tail {
        Verdict::Replaces { previous_next_offset }
    } else {
        Verdict::GrowsUnderSuccessor { previous_next_offset }
    }
}

#[cfg(test)]
mod tests;
