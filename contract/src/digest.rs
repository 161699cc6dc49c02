//! Digests of bytes that went through a transport: size, CRC-32C and SHA-256, computed in one pass.
//!
//! Why in the contract: a manifest promises each file's size and SHA-256, and whoever carries the bytes (the
//! bucket's store, either side of the direct link, the applier checking a file it finds on disk) must compute the
//! same digest the same way to keep that promise. It is pure computation over bytes or a file, no transport.

use std::path::Path;

use crate::manifest::Sha256Digest;
use crate::objects::Digest;

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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

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
