//! Staging a chunked `.log` (`segmirror.manifest.v2`): the installed prefix reused, only new chunks downloaded.
//!
//! A v2 version lists its `.log` as chunk objects `[from, to)` (see `segmirror_transport::manifest::LogChunk`). The
//! staged `.log` is assembled in byte order:
//! 1. **The installed prefix.** When the partition directory's `.log` of this segment ends exactly where some chunk
//!    ends, its bytes are copied into staging while each chunk range is hashed and compared with the chunk's CRC-32C
//!    and SHA-256: the prefix is proved by the digests the manifest names, never downloaded again. Installed bytes
//!    that differ from what a chunk says are a refusal naming the chunk's key (the bucket and the mirror disagree
//!    about offsets already installed; nothing is overwritten). A prefix ending inside a chunk is not used (the
//!    chunks are then all downloaded, as a v1 version would be).
//! 2. **The new chunks**, one at a time (disk and memory bounded by one chunk plus the scanner's window): downloaded
//!    to a file beside the staged `.log`, checked against the manifest's size and SHA-256 while streaming and its
//!    CRC-32C after, then scanned as a `.log` of its own: whole batches only (a chunk that does not end on a batch
//!    boundary is refused), every batch CRC, offsets above the previous chunk's end and the last batch ending
//!    exactly at the chunk's `next_offset`. Then appended.
//! 3. The assembled file's size, CRC-32C and SHA-256 are compared with the manifest's `.log` entry.
//!
//! The usual validation of the whole version (`validate`: every batch again, indexes, epochs) follows.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use segment_format::dir::SegmentFileKind;
use segment_format::log::LogFile;
use segment_format::progress::Progress;
use segmirror_transport::digest::Hasher;
use segmirror_transport::manifest::{LogChunk, Manifest};
use segmirror_transport::{Digest, SegmentSource};

use super::blocking;
use crate::chunk_rule::{BatchDefect, ChunkDefect, ChunkRule, Floor, LegacyFrames};
use crate::error::{Error, Result};
use crate::report::Refusal;

/// Bytes copied at a time from the installed prefix or a downloaded chunk.
const COPY_BYTES: usize = 1 << 20;

/// What staging a chunked `.log` did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Assembled {
    /// Bytes downloaded (the new chunks).
    pub fetched: u64,
    /// Bytes taken from the installed `.log` (the prefix).
    pub reused: u64,
}

/// Stage the `.log` of the chunked version `m` at `dest` (see the module docs). `Ok(Err(_))` is a refusal; the
/// caller removes the staging directory.
pub(crate) async fn assemble(
    store: &dyn SegmentSource,
    m: &Manifest,
    partition_dir: &Path,
    dest: &Path,
    progress: &dyn Progress,
) -> Result<std::result::Result<Assembled, Refusal>> {
    let installed = partition_dir.join(segment_format::dir::segment_file_name(
        m.base_offset,
        SegmentFileKind::Log,
    ));
    let (chunks, target) = (m.log_chunks.clone(), dest.to_path_buf());
    let prefix = blocking("copy installed prefix", move || {
        copy_prefix(&installed, &chunks, &target)
    })
    .await?;
    let (reused_chunks, mut whole) = match prefix {
        Ok(p) => p,
        Err(refusal) => return Ok(Err(refusal)),
    };
    let reused = whole.size();
    progress.advance(reused);
    let part = dest.with_extension("chunk");
    let mut fetched = 0;
    let mut previous_next = m
        .log_chunks
        .get(reused_chunks.saturating_sub(1))
        .filter(|_| reused_chunks > 0)
        .map_or(m.base_offset, |c| c.next_offset);
    for chunk in m.log_chunks.iter().skip(reused_chunks) {
        match fetch_chunk(store, chunk, &part).await? {
            Ok(()) => {}
            Err(refusal) => return Ok(Err(refusal)),
        }
        let (c, p, d, hasher) = (chunk.clone(), part.clone(), dest.to_path_buf(), whole);
        let checked = blocking("check and append chunk", move || {
            check_and_append(&c, previous_next, &p, &d, hasher)
        })
        .await?;
        whole = match checked {
            Ok(h) => h,
            Err(refusal) => return Ok(Err(refusal)),
        };
        previous_next = chunk.next_offset;
        fetched += chunk.size();
        progress.advance(chunk.size());
    }
    let got = whole.finish();
    if let Some(log) = m.file(SegmentFileKind::Log) {
        let what = format!("{} (assembled from {} chunks)", log.key, m.log_chunks.len());
        if let Some(refusal) = compare(&what, log.size, log.crc32c, &log.sha256, &got) {
            return Ok(Err(refusal));
        }
    }
    Ok(Ok(Assembled { fetched, reused }))
}

/// Compare a digest with what a manifest entry says; the refusal names `key` and the field.
pub(super) fn compare(
    key: &str,
    size: u64,
    crc32c: u32,
    sha256: &segmirror_transport::manifest::Sha256Digest,
    got: &Digest,
) -> Option<Refusal> {
    let mismatch = |what: &str, expected: String, found: String| Refusal::Mismatch {
        key: key.to_string(),
        what: what.to_string(),
        expected,
        found,
    };
    if got.size != size {
        Some(mismatch("size", size.to_string(), got.size.to_string()))
    } else if got.crc32c != crc32c {
        Some(mismatch(
            "crc32c",
            format!("{crc32c:08x}"),
            format!("{:08x}", got.crc32c),
        ))
    } else if got.sha256 != *sha256 {
        Some(mismatch("sha256", sha256.to_string(), got.sha256.to_string()))
    } else {
        None
    }
}

/// Step 1: create `dest` with the installed `.log`'s bytes when they end on a chunk boundary and match every chunk
/// below it. Returns how many chunks it covers and the hasher over the bytes written.
fn copy_prefix(
    installed: &Path,
    chunks: &[LogChunk],
    dest: &Path,
) -> Result<std::result::Result<(usize, Hasher), Refusal>> {
    let mut out = File::create(dest).map_err(|e| Error::io(dest, e))?;
    let mut whole = Hasher::new();
    let size = match fs::symlink_metadata(installed) {
        Ok(meta) if meta.is_file() => meta.len(),
        _ => return Ok(Ok((0, whole))),
    };
    let Some(covered) = chunks.iter().position(|c| c.to == size).map(|i| i + 1) else {
        return Ok(Ok((0, whole)));
    };
    let mut file = File::open(installed).map_err(|e| Error::io(installed, e))?;
    let mut buf = vec![0u8; COPY_BYTES];
    for chunk in chunks.iter().take(covered) {
        let mut current = Hasher::new();
        let mut left = chunk.size();
        while left > 0 {
            let want = usize::try_from(left.min(COPY_BYTES as u64)).unwrap_or(COPY_BYTES);
            let piece = buf.get_mut(..want).unwrap_or_default();
            file.read_exact(piece).map_err(|e| Error::io(installed, e))?;
            current.update(piece);
            whole.update(piece);
            out.write_all(piece).map_err(|e| Error::io(dest, e))?;
            left -= want as u64;
        }
        let what = format!("{} (installed bytes [{}, {}))", chunk.key, chunk.from, chunk.to);
        if let Some(refusal) = compare(&what, chunk.size(), chunk.crc32c, &chunk.sha256, &current.finish()) {
            return Ok(Err(refusal));
        }
    }
    Ok(Ok((covered, whole)))
}

/// Download one chunk to `part`, verified against its size, SHA-256 and CRC-32C.
pub(super) async fn fetch_chunk(
    store: &dyn SegmentSource,
    chunk: &LogChunk,
    part: &Path,
) -> Result<std::result::Result<(), Refusal>> {
    match store.fetch_file(&chunk.key, part, chunk.size(), &chunk.sha256).await {
        Ok(digest) => Ok(compare(&chunk.key, chunk.size(), chunk.crc32c, &chunk.sha256, &digest).map_or(Ok(()), Err)),
        Err(e) => super::store_refusal(e, "chunk object").map(Err),
    }
}

/// Step 2 for one downloaded chunk: whole batches, CRCs, offsets; then append it to `dest` and remove it.
fn check_and_append(
    chunk: &LogChunk,
    previous_next: i64,
    part: &Path,
    dest: &Path,
    mut whole: Hasher,
) -> Result<std::result::Result<Hasher, Refusal>> {
    if let Err(refusal) = check_chunk(chunk, previous_next, part, &mut |_| {})? {
        return Ok(Err(refusal));
    }
    append(part, dest, &mut whole)?;
    Ok(Ok(whole))
}

/// The checks of one downloaded chunk at `part`: whole batches only, every batch CRC, offsets above
/// `previous_next - 1`, the last batch ending at the chunk's `next_offset`. `on_batch` sees each batch (its position
/// in the chunk file, not in the segment). A refusal names the chunk's key and the field.
pub(super) fn check_chunk(
    chunk: &LogChunk,
    previous_next: i64,
    part: &Path,
    on_batch: &mut dyn FnMut(&segment_format::batch::BatchInfo),
) -> Result<std::result::Result<(), Refusal>> {
    let bad = |field: &str, reason: String| Refusal::InvalidManifest {
        reason: format!(
            "chunk {} (bytes [{}, {})), {field}: {reason}",
            chunk.key, chunk.from, chunk.to
        ),
    };
    let mut log = LogFile::open(part).map_err(Error::Format)?;
    let mut problem: Option<Refusal> = None;
    // The rule both appliers apply to a chunk (`crate::chunk_rule`); a bucket version may hold legacy frames.
    let mut rule = ChunkRule::new(Floor::After(previous_next), LegacyFrames::Accept);
    let scanned = log.scan_range(0, chunk.size(), |frame| {
        let at = chunk.from + frame.info.position;
        let expected_min = rule.next_floor();
        if let Err(defect) = rule.accept(frame) {
            problem = Some(match defect {
                BatchDefect::Crc { stored, computed } => bad(
                    "bytes",
                    format!("batch at byte {at}: CRC stored {stored:#010x}, computed {computed:#010x}"),
                ),
                // Not refused here (`LegacyFrames::Accept`); named should that ever change.
                BatchDefect::Legacy { magic } => bad("bytes", format!("batch at byte {at}: magic {magic}")),
                BatchDefect::BaseBelowExpected { .. }
                | BatchDefect::BaseBelowSegment { .. }
                | BatchDefect::LastBelowBase { .. } => bad(
                    "bytes",
                    format!(
                        "batch at byte {at} holds offsets {}..={}, not above {}",
                        frame.info.base_offset,
                        frame.info.last_offset,
                        expected_min - 1
                    ),
                ),
            });
            return ControlFlow::Break(());
        }
        on_batch(&frame.info);
        ControlFlow::Continue(())
    });
    let summary = match scanned {
        Ok(s) => s,
        Err(e) if e.is_incomplete() => {
            return Ok(Err(bad("to", format!("not a batch boundary: {e}"))));
        }
        Err(e) if e.is_corrupt() => return Ok(Err(bad("bytes", e.to_string()))),
        Err(e) => return Err(Error::Format(e)),
    };
    if let Some(p) = problem {
        return Ok(Err(p));
    }
    let last_next = match rule.finish(summary.end, chunk.size()) {
        Err(ChunkDefect::NotOnBoundary { end }) => {
            return Ok(Err(bad(
                "to",
                format!("not a batch boundary (batches end at byte {})", chunk.from + end),
            )))
        }
        Err(ChunkDefect::NoBatch) => None,
        Ok(last) => Some(last.saturating_add(1)),
    };
    if last_next != Some(chunk.next_offset) {
        return Ok(Err(bad(
            "next_offset",
            format!(
                "{} but its batches end before offset {}",
                chunk.next_offset,
                last_next.map_or_else(|| "none (no batch)".to_string(), |n| n.to_string())
            ),
        )));
    }
    Ok(Ok(()))
}

/// Append `part` to `dest` while hashing, then remove `part`.
pub(super) fn append(part: &Path, dest: &Path, whole: &mut Hasher) -> Result<()> {
    let mut from = File::open(part).map_err(|e| Error::io(part, e))?;
    let mut to = OpenOptions::new()
        .append(true)
        .open(dest)
        .map_err(|e| Error::io(dest, e))?;
    let mut buf = vec![0u8; COPY_BYTES];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io(part, e)),
        };
        let piece = buf.get(..n).unwrap_or_default();
        whole.update(piece);
        to.write_all(piece).map_err(|e| Error::io(dest, e))?;
    }
    fs::remove_file(part).map_err(|e| Error::io(PathBuf::from(part), e))
}

#[cfg(test)]
mod tests;
