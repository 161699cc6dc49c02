//! Compaction as the feed sees it: a sealed segment it already shipped was rewritten by the broker's cleaner
//! (`.cleaned` → `.swap` → renamed into place, several segments possibly merged into one with the first one's
//! base), and the new version travels as [`SegmentReplace`] pieces for the applier to stage, validate and install
//! (`applier::tail::replace`).
//!
//! How a rewrite is noticed: the feed remembers, per sealed segment it shipped, the file's inode and size when it
//! sealed it (a [`Fingerprint`]). The cleaner never writes a live segment in place: it renames a new file over it,
//! so a new inode (or a different size) at that name, or segments gone from between two that remain, is a
//! rewrite. The segments a new version replaces are the remembered ones in `[its base, the next segment's base)`.
//!
//! How it travels: pieces of at most the chunk limit, read from the new file in order; before the last one the
//! file is hashed whole and its fingerprint checked again (a rewrite while pieces travelled starts the
//! replacement over at byte 0, which the applier takes as a fresh staging). The last piece carries the size,
//! SHA-256 and companions, as a seal does. Only then does the memory take the new fingerprint.
//!
//! Where the memory starts: with the applier's MirrorLayout (feature bit 7) every session starts from the mirror's
//! actual sealed segments, by base and size ([`from_layout`]; a size match is then remembered by inode), so a
//! rewrite made while no feed ran in this process, or a replacement cut before its install, is found and sent.
//! The segment the mirror appends to, when the source's cleaner rewrote or merged it, is in the memory as an
//! `unsealed` entry that never matches (`resume`), so the sealed source segment covering it replaces it.
//!
//! What is not covered without the layout (an older applier): the memory starts with what this process sealed,
//! so segments rewritten while no feed of this process ran, and a replacement whose last piece was sent but not
//! installed before a cut (the memory already holds the new fingerprint), are not replaced. The mirror then keeps
//! the earlier version, which holds every record the new one holds (compaction only removes): sound, only larger.

use std::collections::BTreeMap;

use bytes::Bytes;
use segmirror_transport::digest::digest_file;
use segmirror_transport::direct::payload::{LayoutSegment, ReplaceEnd, SegmentReplace};
use segmirror_transport::direct::session::FeedItem;

use super::*;
use crate::source::read::PartitionView;

#[cfg(test)]
#[path = "replace_tests.rs"]
mod tests;

/// What identifies one version of a sealed segment file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fingerprint {
    /// `None`: known from the applier's MirrorLayout, which knows sizes only; the size then decides, and a match
    /// takes the file's inode from then on.
    pub inode: Option<u64>,
    pub size: u64,
    /// The mirror's segment being tailed, which the source no longer holds as such (the cleaner merged it into a
    /// sealed segment, `resume`): never a match, so the covering source segment replaces it.
    pub unsealed: bool,
}

impl Fingerprint {
    /// The fingerprint of a sealed version this feed read itself.
    pub(super) fn of(inode: u64, size: u64) -> Fingerprint {
        Fingerprint {
            inode: Some(inode),
            size,
            unsealed: false,
        }
    }

    /// Whether the file now at the segment's name (`now`, read from disk) is the version this describes.
    fn matches(&self, now: &Fingerprint) -> bool {
        !self.unsealed && self.size == now.size && self.inode.is_none_or(|i| Some(i) == now.inode)
    }
}

/// The feed's memory seeded from the applier's MirrorLayout: the mirror's sealed segments by base and size.
pub(super) fn from_layout(segments: &[LayoutSegment]) -> BTreeMap<i64, Fingerprint> {
    segments
        .iter()
        .map(|s| {
            (
                s.base,
                Fingerprint {
                    inode: None,
                    size: s.size,
                    unsealed: false,
                },
            )
        })
        .collect()
}

/// A replacement being sent.
#[derive(Debug, Clone)]
pub(super) struct Replacing {
    base: i64,
    replaced: Vec<i64>,
    path: PathBuf,
    fingerprint: Fingerprint,
    /// Bytes sent so far.
    position: u64,
    /// Seen by two consecutive listings: a listing taken while the broker swapped segments in may show a hole that
    /// the next one no longer shows, so one listing alone never starts a replacement.
    confirmed: bool,
}

/// Whether the broker is swapping segments in (a `.swap` file in `dir`): the old segments may already be renamed
/// away and the new ones not yet in place, so the listing shows a hole that is neither retention nor a merge.
pub(super) fn swap_in_progress(dir: &Path) -> Result<bool> {
    use segment_format::dir::{classify_partition_file, PartitionFile, TransientSuffix};
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        if let PartitionFile::Transient {
            suffix: TransientSuffix::Swap,
            ..
        } = classify_partition_file(&entry.file_name().to_string_lossy())
        {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The fingerprint of the file at `path`; `None` when it is gone.
pub(super) fn fingerprint(path: &Path) -> Result<Option<Fingerprint>> {
    match std::fs::metadata(path) {
        Ok(m) => Ok(Some(Fingerprint::of(inode_of(&m), m.len()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

#[cfg(unix)]
fn inode_of(m: &std::fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(m)
}

#[cfg(not(unix))]
fn inode_of(_: &std::fs::Metadata) -> u64 {
    0
}

/// The next replacement piece of this partition, if a sealed segment it shipped was rewritten. `sealed` is the
/// feed's memory of the versions it shipped (pruned below the log start by [`forget_below`]), `current` the base
/// of the segment it tails (never replaced here).
pub(super) fn next_piece(
    partition: &PartitionRef,
    view: &PartitionView,
    current: i64,
    sealed: &mut BTreeMap<i64, Fingerprint>,
    replacing: &mut Option<Replacing>,
    max_chunk_bytes: u64,
) -> Result<Option<FeedItem>> {
    if let Some(r) = replacing.as_ref() {
        if fingerprint(&r.path)? != Some(r.fingerprint) {
            *replacing = None; // rewritten again: start over from what the listing shows now
        }
    }
    match replacing.as_mut() {
        None => {
            // A candidate; it starts only if the next step's listing finds the same.
            *replacing = detect(view, current, sealed)?;
            return Ok(None);
        }
        Some(r) if !r.confirmed => {
            let again = detect(view, current, sealed)?;
            match again {
                Some(a) if a.base == r.base && a.replaced == r.replaced && a.fingerprint == r.fingerprint => {
                    r.confirmed = true;
                }
                other => {
                    *replacing = other;
                    return Ok(None);
                }
            }
        }
        Some(_) => {}
    }
    let Some(r) = replacing.as_mut() else {
        return Ok(None);
    };
    let to = r
        .fingerprint
        .size
        .min(r.position.saturating_add(max_chunk_bytes.max(1)));
    let bytes = read_range(&r.path, r.position, to)?;
    let mut piece = SegmentReplace {
        partition: partition.clone(),
        replaced_bases: r.replaced.clone(),
        position: r.position,
        bytes: Bytes::from(bytes),
        end: None,
    };
    r.position = to;
    if to == r.fingerprint.size {
        let digest = digest_file(&r.path)?;
        if digest.size != r.fingerprint.size || fingerprint(&r.path)? != Some(r.fingerprint) {
            *replacing = None; // changed while read: the next step starts over
            return Ok(None);
        }
        let segment = view.segments.iter().find(|s| s.base_offset() == r.base);
        let companions = match segment {
            Some(segment) => companions(segment, true, None)?,
            None => {
                *replacing = None;
                return Ok(None);
            }
        };
        piece.end = Some(ReplaceEnd {
            final_size: digest.size,
            log_sha256: digest.sha256.0,
            companions,
            next_base: segment.and_then(|s| s.next_base),
        });
        for base in &r.replaced {
            sealed.remove(base);
        }
        sealed.insert(r.base, r.fingerprint);
        tracing::info!(partition = %name(partition), base = r.base, replaced = ?r.replaced, size = digest.size,
            "shipping a compacted replacement");
        *replacing = None;
    }
    Ok(Some(FeedItem::Replace(piece)))
}

/// The first sealed segment below `current` whose version differs from the one shipped.
fn detect(view: &PartitionView, current: i64, sealed: &mut BTreeMap<i64, Fingerprint>) -> Result<Option<Replacing>> {
    for segment in view.segments.iter().filter(|s| s.base_offset() < current) {
        let base = segment.base_offset();
        if segment.next_base.is_some_and(|n| n > current) {
            // It holds the feed's own segment (merged into it): the tail moves past it first (`resume::cover`),
            // and the range it replaces is then whole.
            continue;
        }
        let upper = segment.next_base.unwrap_or(current).min(current);
        let shipped: Vec<i64> = sealed.range(base..upper).map(|(b, _)| *b).collect();
        if shipped.is_empty() {
            continue; // not shipped by this process: nothing known to compare with
        }
        let Some(now) = fingerprint(&segment.files.log)? else {
            continue; // gone since the listing: the next step sees the new state
        };
        if shipped == [base] {
            match sealed.get_mut(&base) {
                Some(known) if known.matches(&now) => {
                    // Known by size only (the mirror's layout): from now on by this file's inode too.
                    *known = now;
                    continue;
                }
                _ => {}
            }
        }
        if shipped.first() != Some(&base) {
            // A remembered segment inside a range whose first segment this process never sealed: not a cleaner's
            // merge (its output takes the first replaced base); remember the current version and go on.
            sealed.insert(base, now);
            continue;
        }
        return Ok(Some(Replacing {
            base,
            replaced: shipped,
            path: segment.files.log.clone(),
            fingerprint: now,
            position: 0,
            confirmed: false,
        }));
    }
    Ok(None)
}

/// Forgets the versions of segments below a log start the applier was told (retention took them).
pub(super) fn forget_below(sealed: &mut BTreeMap<i64, Fingerprint>, log_start: i64) {
    sealed.retain(|base, _| *base >= log_start);
}
