//! The byte pumps behind [`Store`](super::Store)'s transfers: reading a file in
//! parts and writing a download to disk, hashing (size, CRC-32C, SHA-256) on the
//! way. Everything here runs on blocking threads.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use bytes::{Bytes, BytesMut};
use segment_format::manifest::Sha256Digest;
use sha2::Digest as _;
use tokio::sync::mpsc;

use super::{Digest, READ_CHUNK};
use crate::error::{Error, Result};

/// Running size/CRC-32C/SHA-256.
#[derive(Clone)]
pub(super) struct Hasher {
    size: u64,
    crc: u32,
    sha: sha2::Sha256,
}

impl Hasher {
    pub(super) fn new() -> Self {
        Hasher {
            size: 0,
            crc: 0,
            sha: sha2::Sha256::new(),
        }
    }

    pub(super) fn update(&mut self, bytes: &[u8]) {
        self.size += bytes.len() as u64;
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.sha.update(bytes);
    }

    pub(super) fn finish(self) -> Digest {
        Digest {
            size: self.size,
            crc32c: self.crc,
            sha256: Sha256Digest(self.sha.finalize().into()),
        }
    }
}

/// Size and checksums of a byte slice, as the store computes them.
pub fn digest_of(bytes: &[u8]) -> Digest {
    let mut h = Hasher::new();
    h.update(bytes);
    h.finish()
}

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
    if hasher.size != len {
        return Err(shrank(path, len, hasher.size));
    }
    Ok((out.freeze(), hasher.finish()))
}

fn shrank(path: &Path, expected: u64, found: u64) -> Error {
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
        let mut part = BytesMut::zeroed(part_size);
        let mut filled = 0;
        while filled < part_size {
            let Some(rest) = part.get_mut(filled..) else { break };
            let n = limited.read(rest).map_err(|e| Error::io(path, e))?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        part.truncate(filled);
        if filled == 0 {
            break;
        }
        hasher.update(&part);
        if tx.blocking_send(part.freeze()).is_err() {
            break;
        }
        if filled < part_size {
            break;
        }
    }
    if hasher.size != len {
        return Err(shrank(path, len, hasher.size));
    }
    Ok(hasher.finish())
}

/// Where downloaded bytes go.
pub(super) enum Sink {
    File(PathBuf),
    Discard,
}

impl Sink {
    /// Runs on a blocking thread: hash (and write) every chunk until the sender is
    /// dropped; fsync a file at the end.
    pub(super) fn consume(self, mut rx: mpsc::Receiver<Bytes>) -> Result<Digest> {
        let mut hasher = Hasher::new();
        match self {
            Sink::Discard => {
                while let Some(chunk) = rx.blocking_recv() {
                    hasher.update(&chunk);
                }
            }
            Sink::File(path) => {
                let file = std::fs::File::create(&path).map_err(|e| Error::io(&path, e))?;
                let mut out = std::io::BufWriter::with_capacity(READ_CHUNK, file);
                while let Some(chunk) = rx.blocking_recv() {
                    hasher.update(&chunk);
                    out.write_all(&chunk).map_err(|e| Error::io(&path, e))?;
                }
                let file = out.into_inner().map_err(|e| Error::io(&path, e.into_error()))?;
                file.sync_all().map_err(|e| Error::io(&path, e))?;
            }
        }
        Ok(hasher.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_matches_known_values() {
        // SHA-256("abc") and CRC-32C("123456789") = 0xE3069283 (the standard check value).
        let d = digest_of(b"abc");
        assert_eq!(
            d.sha256.to_string(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(digest_of(b"123456789").crc32c, 0xe306_9283);
        let mut h = Hasher::new();
        h.update(b"1234");
        h.update(b"56789");
        assert_eq!(h.finish(), digest_of(b"123456789"));
    }
}
