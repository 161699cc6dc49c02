//! The byte pumps behind [`Store`](super::Store)'s transfers: reading a file in
//! parts and writing a download to disk, hashing (size, CRC-32C, SHA-256) on the
//! way. Everything here runs on blocking threads.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use segmirror_contract::digest::Hasher;
use tokio::sync::mpsc;

use super::{Digest, READ_CHUNK};
use segmirror_contract::error::{Error, Result};

/// Read exactly `len` bytes from the start of `file`, hashing them.
pub(super) fn read_exact_hashing(file: std::fs::File, len: u64, path: &Path) -> Result<(Bytes, Digest)> {
    let mut hasher = Hasher::new();
    let mut out = BytesMut::with_capacity(usize::try_from(len).unwrap_or(0));
    let mut limited = file.take(len);
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let n = limited.read(&mut buf).map_err(|e| Error::io(path, e))?;
        let Some(chunk) = buf.get(..n) else { break };
        if chunk.is_empty() {
            break;
        }
        hasher.update(chunk);
        out.extend_from_slice(chunk);
    }
    if hasher.size() != len {
        return Err(shrank(path, len, hasher.size()));
    }
    Ok((out.freeze(), hasher.finish()))
}

pub(super) fn shrank(path: &Path, expected: u64, found: u64) -> Error {
    Error::io(
        path,
        std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("file ended after {found} of {expected} bytes (it shrank while being read)"),
        ),
    )
}

/// Read `len` bytes of `file` in `part_size` pieces, hashing them, and send each
/// piece to the uploader. Stops quietly if the uploader hung up (it reports why).
///
/// Each piece is read [`READ_CHUNK`] bytes at a time, each chunk hashed while it
/// is still in the CPU's cache, into memory that is not zeroed first (a part is
/// read into the spare capacity of its buffer).
pub(super) fn read_parts(
    file: std::fs::File,
    len: u64,
    part_size: usize,
    path: &Path,
    tx: mpsc::Sender<Bytes>,
) -> Result<Digest> {
    let mut hasher = Hasher::new();
    let mut limited = file.take(len);
    loop {
        let mut part: Vec<u8> = Vec::with_capacity(part_size);
        while part.len() < part_size {
            let before = part.len();
            let want = (part_size - before).min(READ_CHUNK) as u64;
            (&mut limited)
                .take(want)
                .read_to_end(&mut part)
                .map_err(|e| Error::io(path, e))?;
            match part.get(before..) {
                Some(chunk) if !chunk.is_empty() => hasher.update(chunk),
                _ => break,
            }
        }
        let filled = part.len();
        if filled == 0 {
            break;
        }
        if tx.blocking_send(Bytes::from(part)).is_err() {
            break;
        }
        if filled < part_size {
            break;
        }
    }
    if hasher.size() != len {
        return Err(shrank(path, len, hasher.size()));
    }
    Ok(hasher.finish())
}

/// Where downloaded bytes go (a destination; "sink" is the transport's word for where segments are shipped).
pub(super) enum Dest {
    File(PathBuf),
    Discard,
}

/// A [`Dest`] being filled.
struct Filling {
    /// Buffered: a stream may hand over a few KiB at a time.
    file: Option<(std::io::BufWriter<std::fs::File>, PathBuf)>,
    hasher: Hasher,
}

impl Filling {
    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.hasher.update(bytes);
        if let Some((file, path)) = &mut self.file {
            file.write_all(bytes).map_err(|e| Error::io(&*path, e))?;
        }
        Ok(())
    }

    /// Flush a file (written, not fsynced: the caller fsyncs what it keeps); the digest of everything written.
    fn finish(self) -> Result<Digest> {
        if let Some((out, path)) = self.file {
            out.into_inner().map_err(|e| Error::io(&path, e.into_error()))?;
        }
        Ok(self.hasher.finish())
    }
}

impl Dest {
    fn open(self) -> Result<Filling> {
        let file = match self {
            Dest::Discard => None,
            Dest::File(path) => {
                let file = std::fs::File::create(&path).map_err(|e| Error::io(&path, e))?;
                Some((std::io::BufWriter::with_capacity(READ_CHUNK, file), path))
            }
        };
        Ok(Filling {
            file,
            hasher: Hasher::new(),
        })
    }

    /// Runs on a blocking thread: hash (and write) every chunk until the sender is
    /// dropped.
    pub(super) fn consume(self, mut rx: mpsc::Receiver<Bytes>) -> Result<Digest> {
        let mut sink = self.open()?;
        while let Some(chunk) = rx.blocking_recv() {
            sink.write(&chunk)?;
        }
        sink.finish()
    }
}

/// Bytes hashed between two drops of the range's pages in [`hash_range`].
const HASH_DROP_EVERY: u64 = 8 << 20;

/// Runs on a blocking thread: size and checksums of the `len` bytes of a file
/// from `start` on (a local store's object, read directly rather than as a
/// stream of a few KiB at a time). Stops early at the end of the file; the
/// caller compares the digest's size.
///
/// The pages read are dropped from the page cache as it goes (clean ones only, a hint): the auditor reads every
/// object of a bucket once, and left cached they would push out what the host keeps there for its own use (the
/// broker's data on a seeding host), as the applier's download does not either (`local::get`). Dropped with
/// `durable::drop_cached`, as there: from the file's start each time, so a large folio straddling an earlier
/// drop's end goes too.
pub(super) fn hash_range(mut file: std::fs::File, path: &Path, start: u64, len: u64) -> Result<Digest> {
    let read_error = |e| Error::io(path, e);
    file.seek(SeekFrom::Start(start)).map_err(read_error)?;
    let mut hasher = Hasher::new();
    let mut limited = file.take(len);
    let mut buf = vec![0u8; READ_CHUNK];
    let mut dropped_at = 0u64;
    loop {
        let n = match limited.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(read_error(e)),
        };
        match buf.get(..n) {
            Some(chunk) if !chunk.is_empty() => hasher.update(chunk),
            _ => break,
        }
        if hasher.size() - dropped_at >= HASH_DROP_EVERY {
            dropped_at = hasher.size();
            segment_format::durable::drop_cached(limited.get_ref(), start + dropped_at);
        }
    }
    segment_format::durable::drop_cached(limited.get_ref(), start + hasher.size());
    Ok(hasher.finish())
}

#[cfg(test)]
mod tests {
    use segmirror_contract::digest::digest_of;

    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn hashing_a_range_leaves_its_pages_out_of_the_page_cache() {
        use segment_format::durable::cached_pages;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("obj");
        let data: Vec<u8> = (0..(HASH_DROP_EVERY + (3 << 20) + 7))
            .map(|i| (i * 31 % 251) as u8)
            .collect();
        std::fs::write(&path, &data).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        file.sync_all().unwrap();
        assert!(std::fs::read(&path).unwrap() == data, "read once: cached");
        let len = data.len() as u64;
        let pages = len.div_ceil(4096);
        let before = cached_pages(&file, len).unwrap();
        assert!(
            before >= pages / 2,
            "cached before the hash ({before} of {pages} pages)"
        );
        let digest = hash_range(file.try_clone().unwrap(), &path, 0, len).unwrap();
        assert_eq!(digest, digest_of(&data));
        let after = cached_pages(&file, len).unwrap();
        assert!(after <= 1, "the hashed pages are dropped ({after} of {before} left)");
    }
}
