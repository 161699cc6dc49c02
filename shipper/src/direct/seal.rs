//! A sealed segment's final description: its size and SHA-256 (from the running digest, or one checked pass over
//! the file), its companions (offset, time and transaction indexes; inline or by digest), and the index interval
//! that rebuilds the broker's indexes ([`index_fit`](super::index_fit)). The module doc of [`super`] says what a seal
//! checks and why; a replacement's last piece carries the same companions ([`super::replace`]).

use std::io::Read;
use std::path::Path;

use bytes::Bytes;
use segment_format::index::DEFAULT_INDEX_INTERVAL_BYTES;
use segment_format::open::{open_regular, read_capped};
use segmirror_transport::digest::{digest_file, digest_of};
use segmirror_transport::direct::payload::{Companion, CompanionKind, PartitionRef, SegmentSeal};

use super::index_fit::{self, IndexForm};
use super::{name, running, MAX_INLINE_COMPANION_BYTES, MAX_INLINE_REPLACEMENT_INDEX_BYTES};
use crate::error::{Error, Result};
use crate::source::growing::TailPosition;
use crate::source::read::SegmentView;

/// The seal of `segment`, whose tail `at` is at its end. With a usable running digest (`running`: the segment
/// shipped from byte 0 by this process, the file as the last chunk left it) its SHA-256 and default indexes are
/// taken as they are; otherwise one pass over the file computes the CRC-32C (checked against the chunks shipped)
/// and the SHA-256, and the index interval is fitted from another.
pub(super) fn seal(
    partition: &PartitionRef,
    at: &TailPosition,
    segment: &SegmentView,
    running: Option<running::Finished>,
) -> Result<SegmentSeal> {
    let diverged = |reason: String| Error::Diverged {
        partition: name(partition),
        segment_base: at.base_offset,
        position: at.position,
        reason,
    };
    let (size, sha, default_indexes) = match running {
        Some(r) => {
            tracing::debug!(partition = %name(partition), segment = at.base_offset, size = at.position,
                "sealed with the running digest (no second read)");
            (at.position, r.sha256, r.default_indexes)
        }
        None => {
            let (size, crc, sha) = hash_file(&at.path)?;
            if size != at.position {
                return Err(diverged(format!(
                    "sealed file is {size} bytes, {} were shipped",
                    at.position
                )));
            }
            if crc != at.prefix_crc32c {
                return Err(diverged(format!(
                    "sealed file's CRC-32C {crc:08x} is not the shipped chunks' {:08x}: bytes changed after shipping",
                    at.prefix_crc32c
                )));
            }
            (size, sha, None)
        }
    };
    let form = match &segment.files.index {
        Some(index) => index_fit::fit(
            &at.path,
            at.base_offset,
            index,
            segment.files.time_index.as_deref(),
            default_indexes.as_ref(),
        )?,
        None => IndexForm::Rebuild(DEFAULT_INDEX_INTERVAL_BYTES),
    };
    if form == IndexForm::Broker {
        tracing::warn!(
            partition = %name(partition),
            segment = at.base_offset,
            "no index.interval.bytes rebuilds the broker's offset and time index (a broker restarted inside the \
             segment?): they travel inline up to {MAX_INLINE_REPLACEMENT_INDEX_BYTES} bytes, else the applier \
             refuses the seal"
        );
    }
    let companions = companions(segment, form == IndexForm::Broker, form.interval())?;
    Ok(SegmentSeal {
        partition: partition.clone(),
        segment_base: at.base_offset,
        final_size: size,
        log_sha256: sha,
        companions,
    })
}

/// A sealed segment's companions as a seal (or a replacement's last piece) carries them. `inline_indexes`: the
/// offset and time indexes travel inline too when at most [`MAX_INLINE_REPLACEMENT_INDEX_BYTES`] (a replacement,
/// see there; a seal whose indexes no interval rebuilds, `index_fit`). `index_interval`: the interval the applier
/// rebuilds digest-only indexes with, when not Kafka's default.
pub(super) fn companions(
    segment: &SegmentView,
    inline_indexes: bool,
    index_interval: Option<u32>,
) -> Result<Vec<Companion>> {
    let mut companions = Vec::new();
    let files = [
        (CompanionKind::OffsetIndex, segment.files.index.as_ref(), false),
        (CompanionKind::TimeIndex, segment.files.time_index.as_ref(), false),
        (CompanionKind::TxnIndex, segment.files.txn_index.as_ref(), true),
        // No producer snapshot: the one a broker writes at a roll is named after the *next* segment's base, and a
        // v1 seal carries no offset to name it by, so an applier would place it one segment early. Promotion starts
        // producer state empty anyway (docs/promotion.md), and a broker rebuilds it from the log without one.
    ];
    for (kind, path, inline) in files {
        let Some(path) = path else { continue };
        let inline = inline
            || (inline_indexes
                && std::fs::metadata(path).map_err(|e| Error::io(path, e))?.len()
                    <= MAX_INLINE_REPLACEMENT_INDEX_BYTES);
        // An inline companion is read once, and its digest taken of the bytes that travel; the others are hashed
        // where they lie.
        let (size, sha256, inline) = if inline {
            let bytes = read_capped(path, "inline companion", MAX_INLINE_COMPANION_BYTES)?;
            let digest = digest_of(&bytes);
            (digest.size, digest.sha256.0, Some(Bytes::from(bytes)))
        } else {
            let (size, _, sha256) = hash_file(path)?;
            (size, sha256, None)
        };
        let index_interval = match kind {
            CompanionKind::OffsetIndex | CompanionKind::TimeIndex if inline.is_none() => index_interval,
            _ => None,
        };
        companions.push(Companion {
            kind,
            size,
            sha256,
            inline,
            index_interval,
        });
    }
    Ok(companions)
}

/// Size, CRC-32C and SHA-256 of a whole file, streamed (the workspace's one file hasher).
pub(super) fn hash_file(path: &Path) -> Result<(u64, u32, [u8; 32])> {
    let d = digest_file(path)?;
    Ok((d.size, d.crc32c, d.sha256.0))
}

pub(super) fn read_range(path: &Path, from: u64, to: u64) -> Result<Vec<u8>> {
    use std::io::{Seek, SeekFrom};
    let (mut file, _) = open_regular(path)?;
    file.seek(SeekFrom::Start(from)).map_err(|e| Error::io(path, e))?;
    let len = usize::try_from(to.saturating_sub(from)).map_err(|_| {
        Error::io(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "range too large"),
        )
    })?;
    let mut bytes = vec![0u8; len];
    file.read_exact(&mut bytes).map_err(|e| Error::io(path, e))?;
    Ok(bytes)
}
