//! The byte pumps behind [`Store`](super::Store)'s transfers: reading a file in
//! parts and writing a download to disk, hashing (size, CRC-32C, SHA-256) on the
//! way. Everything here runs on blocking threads.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::manifest::Sha256Digest;
use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc;

use super::{Digest, READ_CHUNK};
use crate::error::{Error, Result};

/// Bytes hashed at a time: CRC-32C then SHA-256 over a piece small enough to
/// stay in the CPU's cache between the two, so large chunks are read from
/// memory once.
const HASH_PIECE: usize = 64 << 10;

/// Running size, CRC-32C and SHA-256 of a byte stream, as the store computes
/// them for every transfer (and the applier for files it finds on disk).
///
/// SHA-256 is nearly all the CPU time of a transfer, so it is AWS-LC's, which
/// uses the SHA extensions of the CPU where they exist.
#[derive(Clone)]
pub struct Hasher {
    size: u64,
    crc: u32,
    sha: aws_lc_rs::digest::Context,
}

impl Default for Hasher {
    fn default() -> Self {
        Hasher::new()
    }
}

impl Hasher {
    pub fn new() -> Self {
        Hasher {
            size: 0,
            crc: 0,
            sha: aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256),
        }
    }

    /// Bytes hashed so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn update(&mut self, bytes: &[u8]) {
        self.size += bytes.len() as u64;
        for piece in bytes.chunks(HASH_PIECE) {
            self.crc = crc32c::crc32c_append(self.crc, piece);
            self.sha.update(piece);
        }
    }

    pub fn finish(self) -> Digest {
        let mut sha256 = [0u8; 32];
        sha256.copy_from_slice(self.sha.finish().as_ref());
        Digest {
            size: self.size,
            crc32c: self.crc,
            sha256: Sha256Digest(sha256),
        }
    }
}

/// Size and checksums of a byte slice, as the store computes them.
pub fn digest_of(bytes: &[u8]) -> Digest {
    let mut h = Hasher::new();
    h.update(bytes);
    h.finish()
}

/// Bytes read at a time by [`digest_file`]: large enough that the read calls cost nothing beside the hashing.
const DIGEST_FILE_READ: usize = 1 << 20;

/// Size, CRC-32C and SHA-256 of a whole file, streamed (blocking: call it off the async runtime). The one
/// file hasher of the workspace: the applier's install and tail appender and the shipper's tail feed use it. Only
/// a regular file is opened (`segment_format::open::open_regular`): a FIFO or symlink put where a segment file
/// was expected is an error naming it, never a read that blocks or follows the link.
pub fn digest_file(path: &Path) -> Result<Digest, segment_format::Error> {
    use std::io::Read as _;
    let (mut file, _) = segment_format::open::open_regular(path)?;
    let mut buf = vec![0u8; DIGEST_FILE_READ];
    let mut hasher = Hasher::new();
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(hasher.finish()),
            Ok(n) => hasher.update(buf.get(..n).unwrap_or_default()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(segment_format::Error::io(path, e)),
        }
    }
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
    if hasher.size != len {
        return Err(shrank(path, len, hasher.size));
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
    use proptest::prelude::*;

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

    #[cfg(target_os = "linux")]
    #[test]
    fn digest_file_opens_only_regular_files_and_names_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("f");
        std::fs::write(&target, b"bytes").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let fifo = dir.path().join("fifo");
        let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        for path in [&link, &fifo] {
            let e = digest_file(path).unwrap_err();
            assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        }
        assert_eq!(digest_file(&target).unwrap().size, 5);
    }

    #[test]
    fn digest_file_matches_hashing_its_bytes() {
        use sha2::Digest as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let Digest {
            size,
            crc32c: crc,
            sha256,
        } = digest_file(&path).unwrap();
        assert_eq!(size, bytes.len() as u64);
        assert_eq!(crc, crc32c::crc32c(&bytes));
        assert_eq!(
            sha256.0,
            <[u8; 32]>::from(sha2::Sha256::digest(&bytes)),
            "the sha2 crate agrees"
        );
    }

    proptest! {
        #[test]
        fn hashing_in_any_pieces_agrees_with_independent_implementations(
            bytes in proptest::collection::vec(any::<u8>(), 0..300_000),
            cut in 0usize..300_000,
        ) {
            use sha2::Digest as _;
            let cut = cut.min(bytes.len());
            let mut h = Hasher::new();
            h.update(&bytes[..cut]);
            h.update(&bytes[cut..]);
            prop_assert_eq!(h.size(), bytes.len() as u64);
            let d = h.finish();
            prop_assert_eq!(d, digest_of(&bytes));
            prop_assert_eq!(d.sha256.0, <[u8; 32]>::from(sha2::Sha256::digest(&bytes)));
            prop_assert_eq!(d.crc32c, crc32c::crc32c(&bytes));
        }
    }

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
