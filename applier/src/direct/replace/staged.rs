//! The checks of a staged replacement before anything in the partition directory changes (the module doc's
//! "What is checked"): its size and digest, every batch, every companion.

use super::*;
use crate::chunk_rule::{BatchDefect, ChunkDefect, ChunkRule, Floor, LegacyFrames};

/// A companion to place: its file kind and bytes.
pub(super) type Placed = (SegmentFileKind, Vec<u8>);

/// The staged replacement at `staged` against `seal`: its size and digest, every batch (offsets within
/// `[first, upper)`), and each companion inline or rebuilt and matching its digest. Returns the last batch's last
/// offset (`None`: no batch) and the companions to place.
pub(super) fn check_staged(
    seal: &ReplaceSeal,
    staged: &Path,
    name: &str,
    first: i64,
    upper: i64,
) -> TailResult<(Option<i64>, Vec<Placed>)> {
    let bad = |reason: String| refused(name, first, reason);
    let digest = digest_file(staged)?;
    if digest.size != seal.final_size || digest.sha256.0 != seal.log_sha256 {
        return Err(bad(format!(
            "{} holds {} bytes SHA-256 {}, the seal says {} bytes SHA-256 {}",
            staged.display(),
            digest.size,
            hex(&digest.sha256.0),
            seal.final_size,
            hex(&seal.log_sha256)
        )));
    }
    let last_offset =
        validate_replacement(staged, first, upper).map_err(|reason| bad(format!("{}: {reason}", staged.display())))?;
    let mut companions = Vec::with_capacity(seal.companions.len());
    for (i, c) in seal.companions.iter().enumerate() {
        if seal.companions[..i].iter().any(|o| o.kind == c.kind) {
            return Err(bad(format!("companion {:?} listed twice", c.kind)));
        }
        let bytes = match (&c.inline, c.kind) {
            (Some(b), _) => b.to_vec(),
            (None, CompanionKind::OffsetIndex | CompanionKind::TimeIndex) => {
                rebuild_index_with(staged, first, c.kind, rebuild_interval(c))?
            }
            (None, kind) => return Err(bad(format!("companion {kind:?} sent as a digest only"))),
        };
        let sha = sha256(&bytes);
        if bytes.len() as u64 != c.size || sha != c.sha256 {
            return Err(bad(format!(
                "companion {:?}: {} bytes SHA-256 {}, the seal says {} bytes SHA-256 {}",
                c.kind,
                bytes.len(),
                hex(&sha),
                c.size,
                hex(&c.sha256)
            )));
        }
        let kind = match c.kind {
            CompanionKind::OffsetIndex => SegmentFileKind::Index,
            CompanionKind::TimeIndex => SegmentFileKind::TimeIndex,
            CompanionKind::TxnIndex => SegmentFileKind::TxnIndex,
            CompanionKind::ProducerSnapshot => {
                return Err(bad("a producer snapshot companion cannot be placed".into()))
            }
        };
        companions.push((kind, bytes));
    }
    Ok((last_offset, companions))
}

/// Every batch of the staged file: whole, CRC-valid, magic 2, offsets strictly increasing within `[first, upper)`;
/// returns the last batch's last offset (`None`: no batch).
fn validate_replacement(path: &Path, first: i64, upper: i64) -> std::result::Result<Option<i64>, String> {
    let mut log = LogFile::open(path).map_err(|e| e.to_string())?;
    let mut problem: Option<String> = None;
    // The chunk rule (`crate::chunk_rule`) over the whole file, then the bound of the replaced range.
    let mut rule = ChunkRule::new(Floor::SegmentBase(first), LegacyFrames::Refuse);
    let summary = log
        .scan(|frame| {
            let info = &frame.info;
            let reason = match rule.accept(frame) {
                Err(BatchDefect::Crc { stored, computed }) => {
                    Some(format!("CRC stored {stored:#010x}, computed {computed:#010x}"))
                }
                Err(BatchDefect::Legacy { magic }) => Some(format!("magic {magic}")),
                Err(BatchDefect::BaseBelowExpected { base, .. } | BatchDefect::BaseBelowSegment { base, .. }) => {
                    Some(format!(
                        "base offset {base} not above the previous batch's last offset (or below the first replaced \
                         base {first})"
                    ))
                }
                Err(BatchDefect::LastBelowBase { base, last }) => {
                    Some(format!("last offset {last} below base offset {base}"))
                }
                Ok(()) if info.last_offset >= upper => Some(format!(
                    "last offset {} reaches the next segment's base {upper}",
                    info.last_offset
                )),
                Ok(()) => None,
            };
            match reason {
                Some(r) => {
                    problem = Some(format!("batch at byte {}: {r}", info.position));
                    ControlFlow::Break(())
                }
                None => ControlFlow::Continue(()),
            }
        })
        .map_err(|e| e.to_string())?;
    if let Some(p) = problem {
        return Err(p);
    }
    // A scan that ended before the file did stopped at a partial batch (the scan reports framing errors itself).
    match rule.finish(summary.end, log.len()) {
        Err(ChunkDefect::NotOnBoundary { end }) => Err(format!(
            "the file does not end on a batch boundary (whole batches end at byte {end})"
        )),
        // No batch at all is allowed: the cleaner may remove every record of a range and still swap the empty file
        // in.
        Err(ChunkDefect::NoBatch) => Ok(None),
        Ok(last) => Ok(Some(last)),
    }
}
