//! A grown version of a shipped segment as appendable chunks (`segmirror.manifest.v2`): the chunks the bucket has
//! are referenced, only the bytes after them are uploaded.
//!
//! Referencing is not believing: before a chunk is listed again, the source's bytes in its range are hashed and
//! compared with the chunk's CRC-32C and SHA-256 (a source truncated and rewritten below what was shipped must not
//! be committed as the shipped bytes plus a new tail). That is one local read of the prefix per rerun — the same
//! read the verification of the active segment makes anyway — and no upload. The new bytes are copied to a staging
//! file while hashed, in the same pass, and that file is uploaded, so the chunk object holds exactly what was hashed
//! even if the source changes meanwhile.

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

use segment_format::dir::SegmentFileKind;
use segmirror_transport::digest::Hasher;
use segmirror_transport::manifest::{LogChunk, Manifest};
use segmirror_transport::Digest;

/// Bytes read at a time while hashing the source prefix (the read is sequential; larger buys nothing).
const READ_BYTES: usize = 1 << 20;

/// The chunks of a shipped version a grown one can reference: a v2 version's chunks, or a v1 version's whole `.log`
/// object as one chunk from byte 0. Empty when there is nothing to reference (an empty `.log`).
pub(crate) fn previous_chunks(shipped: &Manifest) -> Vec<LogChunk> {
    if shipped.is_chunked() {
        return shipped.log_chunks.clone();
    }
    match shipped.file(SegmentFileKind::Log) {
        Some(log) if log.size > 0 => vec![LogChunk {
            from: 0,
            to: log.size,
            next_offset: shipped.next_offset,
            key: log.key.clone(),
            crc32c: log.crc32c,
            sha256: log.sha256,
        }],
        _ => Vec::new(),
    }
}

/// What one pass over the source `.log` found.
#[derive(Debug)]
pub(crate) enum Reading {
    /// The referenced chunks match; `whole` is the digest of `[0, len)`, `new_bytes` the bytes after the last
    /// referenced chunk, copied to a staging file (`None` when there are none).
    Ready {
        whole: Digest,
        new_bytes: Option<(tempfile::NamedTempFile, Digest)>,
    },
    /// The source's bytes in a referenced chunk's range are not the chunk's.
    Differs {
        key: String,
        from: u64,
        to: u64,
        field: &'static str,
    },
    /// The file ended before `len` (truncated while read).
    Short { at: u64 },
}

/// Read `[0, len)` of `log` once: check each of `reused` (contiguous from byte 0) against the bytes, hash the whole,
/// and copy the bytes after the last reused chunk into a new file in `staging`.
pub(crate) fn read_for_chunks(log: &Path, len: u64, reused: &[LogChunk], staging: &Path) -> std::io::Result<Reading> {
    let mut file = File::open(log)?.take(len);
    let new_from = reused.last().map_or(0, |c| c.to);
    let mut whole = Hasher::new();
    let mut current = Hasher::new();
    let mut next_chunk = 0usize;
    let mut out = if new_from < len {
        Some((tempfile::NamedTempFile::new_in(staging)?, Hasher::new()))
    } else {
        None
    };
    let mut buf = vec![0u8; READ_BYTES];
    let mut at = 0u64;
    while at < len {
        let n = match file.read(&mut buf) {
            Ok(0) => return Ok(Reading::Short { at }),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        let mut rest = buf.get(..n).unwrap_or_default();
        while !rest.is_empty() {
            // Up to the end of the current reused chunk, or all of it past the reused ones.
            let boundary = reused.get(next_chunk).map_or(u64::MAX, |c| c.to);
            let take = usize::try_from((boundary - at).min(rest.len() as u64)).unwrap_or(rest.len());
            let (piece, tail) = rest.split_at(take);
            whole.update(piece);
            match (reused.get(next_chunk), out.as_mut()) {
                (Some(_), _) => current.update(piece),
                (None, Some((f, h))) => {
                    f.write_all(piece)?;
                    h.update(piece);
                }
                (None, None) => {}
            }
            at += take as u64;
            rest = tail;
            if let Some(c) = reused.get(next_chunk).filter(|c| c.to == at) {
                let got = std::mem::take(&mut current).finish();
                let field = if got.crc32c != c.crc32c {
                    Some("crc32c")
                } else if got.sha256 != c.sha256 {
                    Some("sha256")
                } else {
                    None
                };
                if let Some(field) = field {
                    return Ok(Reading::Differs {
                        key: c.key.clone(),
                        from: c.from,
                        to: c.to,
                        field,
                    });
                }
                next_chunk += 1;
            }
        }
    }
    let new_bytes = match out {
        Some((mut f, h)) => {
            f.as_file_mut().sync_data()?;
            Some((f, h.finish()))
        }
        None => None,
    };
    Ok(Reading::Ready {
        whole: whole.finish(),
        new_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use segmirror_transport::digest::digest_of;

    fn chunk(from: u64, bytes: &[u8]) -> LogChunk {
        let d = digest_of(bytes);
        LogChunk {
            from,
            to: from + bytes.len() as u64,
            next_offset: 1,
            key: format!("k{from}"),
            crc32c: d.crc32c,
            sha256: d.sha256,
        }
    }

    #[test]
    fn only_the_bytes_after_the_referenced_chunks_are_copied_and_every_chunk_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("x.log");
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&log, &data).unwrap();
        let reused = [
            chunk(0, &data[..1_500_000]),
            chunk(1_500_000, &data[1_500_000..2_000_000]),
        ];
        let Reading::Ready { whole, new_bytes } = read_for_chunks(&log, 2_800_000, &reused, dir.path()).unwrap() else {
            panic!("expected ready")
        };
        assert_eq!(whole, digest_of(&data[..2_800_000]));
        let (file, digest) = new_bytes.unwrap();
        assert_eq!(digest, digest_of(&data[2_000_000..2_800_000]));
        assert_eq!(std::fs::read(file.path()).unwrap(), &data[2_000_000..2_800_000]);

        // Nothing new: no staging file.
        let Reading::Ready { new_bytes, .. } = read_for_chunks(&log, 2_000_000, &reused, dir.path()).unwrap() else {
            panic!("expected ready")
        };
        assert!(new_bytes.is_none());

        // The source was rewritten inside the second chunk.
        let mut changed = data.clone();
        changed[1_600_000] ^= 1;
        std::fs::write(&log, &changed).unwrap();
        match read_for_chunks(&log, 2_800_000, &reused, dir.path()).unwrap() {
            Reading::Differs { key, from, field, .. } => {
                assert_eq!((key.as_str(), from, field), ("k1500000", 1_500_000, "crc32c"));
            }
            other => panic!("expected a difference, got {other:?}"),
        }

        // Truncated below what the caller read.
        std::fs::write(&log, &data[..100]).unwrap();
        assert!(matches!(
            read_for_chunks(&log, 2_800_000, &reused, dir.path()).unwrap(),
            Reading::Short { at: 100 }
        ));
    }
}
