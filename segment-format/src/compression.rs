//! The four compression codecs exactly as Kafka stores them inside a batch.
//!
//! Kafka does not use the "standard" container of every codec, so reading and
//! writing them with a generic library would either reject valid segments or
//! produce bytes a Java broker cannot read:
//!
//! - **gzip**: plain RFC 1952 members (`GZIPOutputStream`); Java's reader also
//!   accepts several concatenated members, so we do too.
//! - **snappy**: the *xerial* framing of `SnappyOutputStream` — a 16-byte header
//!   (`\x82SNAPPY\0`, version 1, compatible version 1) then blocks
//!   `[i32 big-endian length][raw snappy block]` of at most 32 KiB input each.
//!   `SnappyInputStream` also accepts a plain raw snappy block (what librdkafka
//!   writes) and concatenated xerial streams; so do we.
//! - **lz4**: the LZ4 frame format as `Lz4BlockOutputStream` writes it:
//!   independent 64 KiB blocks, no block or content checksum, no content size.
//!   `Lz4BlockInputStream` rejects dependent blocks, a dictionary id and any
//!   version but 1; it checks block checksums, skips a content size and reads but
//!   does not verify a content checksum. Magic-0 data was written with a *broken*
//!   header checksum (computed over the magic number too), so for magic 0 the
//!   header checksum byte is ignored, as Kafka does.
//! - **zstd**: standard frames; the window is capped at [`ZSTD_WINDOW_LOG_MAX`].
//!
//! Decompression is streaming ([`Decompressor`] implements [`std::io::Read`]):
//! memory is bounded by the codec's block or window size, never by a length a
//! hostile batch claims. The one exception is unframed snappy, which is a single
//! block by definition; its size is capped by
//! [`DecompressOptions::max_snappy_block`].

use std::io::{self, Read, Write};

use crate::batch::Compression;
use crate::error::Defect;

/// `Lz4BlockOutputStream.MAGIC`: the LZ4 frame magic number (stored little-endian).
pub const LZ4_FRAME_MAGIC: u32 = 0x184D_2204;
/// High bit of an LZ4 block size: the block is stored uncompressed.
const LZ4_INCOMPRESSIBLE_MASK: u32 = 0x8000_0000;
/// FLG byte Kafka writes: version 1 (`01` in bits 6-7), independent blocks (bit 5).
const LZ4_KAFKA_FLG: u8 = 0x60;
/// BD byte Kafka writes: block maximum size 64 KiB (value 4 in bits 4-6).
const LZ4_KAFKA_BD: u8 = 0x40;
/// Input bytes per LZ4 block Kafka writes (`BLOCKSIZE_64KB`).
const LZ4_BLOCK_SIZE: usize = 64 * 1024;

/// `SnappyCodec.MAGIC_HEADER`.
pub const SNAPPY_XERIAL_MAGIC: [u8; 8] = [0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
/// Magic + version (i32) + compatible version (i32).
const SNAPPY_XERIAL_HEADER_SIZE: usize = 16;
/// `SnappyOutputStream.DEFAULT_BLOCK_SIZE`: uncompressed bytes per xerial block.
const SNAPPY_XERIAL_BLOCK_SIZE: usize = 32 * 1024;
/// `SnappyInputStream.MAX_CHUNK_SIZE`: the largest compressed chunk Java reads.
const SNAPPY_XERIAL_MAX_CHUNK: i32 = 512 * 1024 * 1024;

/// zstd window cap: 2^27 = 128 MiB. This is zstd's default decoder limit
/// (`ZSTD_WINDOWLOG_LIMIT_DEFAULT`), which zstd-jni — and therefore Kafka — also
/// applies, so every frame a Java broker can read is accepted, while a hostile
/// frame cannot make us allocate more than 128 MiB of window.
pub const ZSTD_WINDOW_LOG_MAX: u32 = 27;

/// Default cap on one snappy block's uncompressed size (64 MiB). Java writers use
/// 32 KiB xerial blocks; librdkafka writes a whole batch as one unframed block,
/// bounded by its `message.max.bytes` (1 MB by default, rarely raised past tens of
/// MiB). Larger claims are reported instead of allocated.
pub const DEFAULT_MAX_SNAPPY_BLOCK: usize = 64 * 1024 * 1024;

/// zstd level Kafka uses by default (`CompressionType.ZSTD.defaultLevel()`).
const ZSTD_DEFAULT_LEVEL: i32 = 3;

/// How to read one compressed stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecompressOptions {
    /// Magic of the batch (or legacy wrapper) holding the stream. Magic 0 LZ4 data
    /// carries a broken header checksum that Kafka ignores.
    pub magic: i8,
    /// Largest uncompressed size accepted for one snappy block.
    pub max_snappy_block: usize,
}

impl Default for DecompressOptions {
    fn default() -> Self {
        DecompressOptions {
            magic: 2,
            max_snappy_block: DEFAULT_MAX_SNAPPY_BLOCK,
        }
    }
}

/// Compress `data` as Kafka stores it in a magic-2 batch.
pub fn compress(codec: Compression, data: &[u8]) -> Vec<u8> {
    compress_for_magic(codec, data, 2)
}

/// Compress `data` for a batch or legacy wrapper of `magic` (only LZ4 differs: magic 0
/// gets the broken header checksum old clients expect).
///
/// # Panics
/// Only if the zstd library fails to allocate its context.
pub fn compress_for_magic(codec: Compression, data: &[u8], magic: i8) -> Vec<u8> {
    match codec {
        Compression::None => data.to_vec(),
        Compression::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            // Writing into a Vec cannot fail.
            let _ = enc.write_all(data);
            enc.finish().unwrap_or_default()
        }
        Compression::Snappy => snappy_xerial_compress(data),
        Compression::Lz4 => lz4_frame_compress(data, magic == 0),
        Compression::Zstd => {
            zstd::stream::encode_all(data, ZSTD_DEFAULT_LEVEL).expect("zstd compression into memory cannot fail")
        }
    }
}

fn snappy_xerial_compress(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(SNAPPY_XERIAL_HEADER_SIZE + data.len() / 2);
    out.extend_from_slice(&SNAPPY_XERIAL_MAGIC);
    out.extend_from_slice(&1i32.to_be_bytes()); // DEFAULT_VERSION
    out.extend_from_slice(&1i32.to_be_bytes()); // MINIMUM_COMPATIBLE_VERSION
    let mut encoder = snap::raw::Encoder::new();
    for chunk in data.chunks(SNAPPY_XERIAL_BLOCK_SIZE) {
        // A 32 KiB input is far below snappy's maximum block size, so this cannot fail.
        let block = encoder.compress_vec(chunk).unwrap_or_default();
        out.extend_from_slice(&(block.len() as i32).to_be_bytes());
        out.extend_from_slice(&block);
    }
    out
}

/// The frame-descriptor checksum byte: second byte of XXH32 (seed 0) over FLG..BD
/// (or, `broken`, over magic..BD as Kafka's magic-0 writer did).
fn lz4_header_checksum(descriptor_with_magic: &[u8], broken: bool) -> u8 {
    let covered = if broken {
        descriptor_with_magic
    } else {
        descriptor_with_magic.get(4..).unwrap_or_default()
    };
    ((twox_hash::XxHash32::oneshot(0, covered) >> 8) & 0xff) as u8
}

fn lz4_frame_compress(data: &[u8], broken_header_checksum: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(11 + data.len() / 2);
    out.extend_from_slice(&LZ4_FRAME_MAGIC.to_le_bytes());
    out.push(LZ4_KAFKA_FLG);
    out.push(LZ4_KAFKA_BD);
    let hc = lz4_header_checksum(&out, broken_header_checksum);
    out.push(hc);
    for chunk in data.chunks(LZ4_BLOCK_SIZE) {
        let block = lz4_flex::block::compress(chunk);
        if block.len() >= chunk.len() {
            out.extend_from_slice(&(chunk.len() as u32 | LZ4_INCOMPRESSIBLE_MASK).to_le_bytes());
            out.extend_from_slice(chunk);
        } else {
            out.extend_from_slice(&(block.len() as u32).to_le_bytes());
            out.extend_from_slice(&block);
        }
    }
    out.extend_from_slice(&0u32.to_le_bytes()); // end mark
    out
}

/// A streaming reader of one compressed stream.
pub struct Decompressor<'a> {
    codec: Compression,
    inner: Inner<'a>,
}

enum Inner<'a> {
    None(&'a [u8]),
    Gzip(Box<flate2::read::MultiGzDecoder<&'a [u8]>>),
    Snappy(SnappyReader<'a>),
    Lz4(Lz4Reader<'a>),
    Zstd(Box<zstd::stream::read::Decoder<'static, &'a [u8]>>),
}

impl std::fmt::Debug for Decompressor<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decompressor").field("codec", &self.codec).finish()
    }
}

impl Decompressor<'_> {
    pub fn codec(&self) -> Compression {
        self.codec
    }
}

impl Read for Decompressor<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.inner {
            Inner::None(data) => data.read(buf),
            Inner::Gzip(r) => r.read(buf),
            Inner::Snappy(r) => r.read(buf),
            Inner::Lz4(r) => r.read(buf),
            Inner::Zstd(r) => r.read(buf),
        }
    }
}

/// Open a streaming decompressor for a magic-2 batch payload, with default limits.
pub fn decompressing_reader(codec: Compression, data: &[u8]) -> Result<Decompressor<'_>, Defect> {
    decompressing_reader_with(codec, data, DecompressOptions::default())
}

/// Open a streaming decompressor. Header problems (bad magic, unsupported LZ4
/// flags, ...) are reported here; problems further in the stream surface as
/// `io::Error`s from `read` (turn them into a [`Defect`] with [`read_error_defect`]).
pub fn decompressing_reader_with(
    codec: Compression,
    data: &[u8],
    options: DecompressOptions,
) -> Result<Decompressor<'_>, Defect> {
    let fail = |message: String| Defect::Decompression {
        codec: codec.name(),
        message,
    };
    let inner = match codec {
        Compression::None => Inner::None(data),
        Compression::Gzip => Inner::Gzip(Box::new(flate2::read::MultiGzDecoder::new(data))),
        Compression::Snappy => Inner::Snappy(SnappyReader::new(data, options.max_snappy_block).map_err(fail)?),
        Compression::Lz4 => Inner::Lz4(Lz4Reader::new(data, options.magic == 0).map_err(fail)?),
        Compression::Zstd => {
            let mut dec = zstd::stream::read::Decoder::with_buffer(data).map_err(|e| fail(e.to_string()))?;
            dec.window_log_max(ZSTD_WINDOW_LOG_MAX)
                .map_err(|e| fail(e.to_string()))?;
            Inner::Zstd(Box::new(dec))
        }
    };
    Ok(Decompressor { codec, inner })
}

/// The defect behind an error returned by [`Decompressor`]'s `read`.
pub fn read_error_defect(codec: Compression, err: &io::Error) -> Defect {
    let message = if err.kind() == io::ErrorKind::UnexpectedEof {
        format!("stream truncated: {err}")
    } else {
        err.to_string()
    };
    Defect::Decompression {
        codec: codec.name(),
        message,
    }
}

fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

/// Xerial-framed or unframed snappy, as `SnappyInputStream` reads it.
struct SnappyReader<'a> {
    data: &'a [u8],
    /// Next unread byte of `data` (xerial mode).
    pos: usize,
    /// Unframed: the whole input is one raw block, decoded on the first read.
    unframed: bool,
    finished: bool,
    max_block: usize,
    decoder: snap::raw::Decoder,
    out: Vec<u8>,
    cursor: usize,
}

impl<'a> SnappyReader<'a> {
    fn new(data: &'a [u8], max_block: usize) -> Result<Self, String> {
        if data.is_empty() {
            return Err("empty snappy stream".into());
        }
        // Like `SnappyInputStream.readHeader`: anything shorter than the 16-byte
        // header, or not starting with the magic, is one raw snappy block.
        let xerial = data.len() >= SNAPPY_XERIAL_HEADER_SIZE && data.starts_with(&SNAPPY_XERIAL_MAGIC);
        Ok(SnappyReader {
            data,
            pos: if xerial { SNAPPY_XERIAL_HEADER_SIZE } else { 0 },
            unframed: !xerial,
            finished: false,
            max_block,
            decoder: snap::raw::Decoder::new(),
            out: Vec::new(),
            cursor: 0,
        })
    }

    fn decode_block(&mut self, block: &[u8]) -> io::Result<()> {
        let len = snap::raw::decompress_len(block).map_err(|e| invalid(format!("snappy block header: {e}")))?;
        if len > self.max_block {
            return Err(invalid(format!(
                "snappy block claims {len} uncompressed bytes, above the limit of {}",
                self.max_block
            )));
        }
        self.out.clear();
        self.out.resize(len, 0);
        let n = self
            .decoder
            .decompress(block, &mut self.out)
            .map_err(|e| invalid(format!("snappy block: {e}")))?;
        if n != len {
            return Err(invalid(format!("snappy block decoded to {n} bytes, header said {len}")));
        }
        self.cursor = 0;
        Ok(())
    }

    /// Load the next block into `out`; false at the end of the stream.
    fn next_block(&mut self) -> io::Result<bool> {
        if self.finished {
            return Ok(false);
        }
        if self.unframed {
            self.finished = true;
            let data = self.data;
            self.decode_block(data)?;
            return Ok(true);
        }
        loop {
            let rest = self.data.get(self.pos..).unwrap_or_default();
            // `hasNextChunk`: fewer than 4 bytes left ends the stream.
            let Some(size_bytes) = rest.get(..4) else {
                self.finished = true;
                return Ok(false);
            };
            if size_bytes == &SNAPPY_XERIAL_MAGIC[..4] {
                // A concatenated stream: another full header follows.
                let Some(header) = rest.get(..SNAPPY_XERIAL_HEADER_SIZE) else {
                    return Err(invalid("truncated header of a concatenated snappy stream"));
                };
                if !header.starts_with(&SNAPPY_XERIAL_MAGIC) {
                    // Java stops reading here without an error.
                    self.finished = true;
                    return Ok(false);
                }
                self.pos += SNAPPY_XERIAL_HEADER_SIZE;
                continue;
            }
            let size = i32::from_be_bytes([size_bytes[0], size_bytes[1], size_bytes[2], size_bytes[3]]);
            if !(0..=SNAPPY_XERIAL_MAX_CHUNK).contains(&size) {
                return Err(invalid(format!(
                    "invalid snappy chunk size {size} at byte {}",
                    self.pos
                )));
            }
            let start = self.pos + 4;
            let Some(block) = self.data.get(start..start + size as usize) else {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "snappy chunk at byte {} needs {size} bytes, {} left",
                        self.pos,
                        rest.len() - 4
                    ),
                ));
            };
            self.pos = start + size as usize;
            self.decode_block(block)?;
            return Ok(true);
        }
    }
}

impl Read for SnappyReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        while self.cursor >= self.out.len() {
            if !self.next_block()? {
                return Ok(0);
            }
        }
        let avail = &self.out[self.cursor..];
        let n = avail.len().min(buf.len());
        buf[..n].copy_from_slice(&avail[..n]);
        self.cursor += n;
        Ok(n)
    }
}

/// The LZ4 frame subset `Lz4BlockInputStream` reads.
struct Lz4Reader<'a> {
    data: &'a [u8],
    pos: usize,
    block_checksum: bool,
    content_checksum: bool,
    max_block: usize,
    finished: bool,
    buf: Vec<u8>,
    /// Current decoded bytes: `buf[start..end]`, or `data[start..end]` for a stored block.
    stored: bool,
    start: usize,
    end: usize,
}

impl<'a> Lz4Reader<'a> {
    fn new(data: &'a [u8], ignore_header_checksum: bool) -> Result<Self, String> {
        let Some(head) = data.get(..6) else {
            return Err(format!(
                "stream ended prematurely: {} bytes, frame header needs 7",
                data.len()
            ));
        };
        let magic = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        if magic != LZ4_FRAME_MAGIC {
            return Err(format!("bad LZ4 frame magic {magic:#010x}"));
        }
        let flg = head[4];
        let bd = head[5];
        if flg & 0x03 != 0 {
            return Err(format!("FLG {flg:#04x}: reserved bits (and dictionary id) must be 0"));
        }
        if flg & 0x20 == 0 {
            return Err(format!("FLG {flg:#04x}: dependent blocks are not supported by Kafka"));
        }
        if flg >> 6 != 1 {
            return Err(format!("FLG {flg:#04x}: version {} is not supported", flg >> 6));
        }
        let block_size_value = (bd >> 4) & 0x07;
        if bd & 0x8f != 0 || !(4..=7).contains(&block_size_value) {
            return Err(format!("BD {bd:#04x}: reserved bits set or block size value not 4..=7"));
        }
        let mut pos = 6;
        if flg & 0x08 != 0 {
            pos += 8; // content size: skipped, as Kafka does
        }
        let Some(&hc) = data.get(pos) else {
            return Err("stream ended prematurely inside the frame descriptor".into());
        };
        if !ignore_header_checksum {
            let expected = lz4_header_checksum(&data[..pos], false);
            if hc != expected {
                return Err(format!(
                    "frame descriptor checksum {hc:#04x}, expected {expected:#04x} (stream frame descriptor corrupted)"
                ));
            }
        }
        Ok(Lz4Reader {
            data,
            pos: pos + 1,
            block_checksum: flg & 0x10 != 0,
            content_checksum: flg & 0x04 != 0,
            max_block: 1 << (2 * usize::from(block_size_value) + 8),
            finished: false,
            buf: Vec::new(),
            stored: false,
            start: 0,
            end: 0,
        })
    }

    fn premature(&self, what: &str) -> io::Error {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("LZ4 stream ended prematurely at byte {} ({what})", self.pos),
        )
    }

    fn read_u32(&mut self, what: &str) -> io::Result<u32> {
        let Some(b) = self.data.get(self.pos..self.pos + 4) else {
            return Err(self.premature(what));
        };
        self.pos += 4;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Load the next block; false at the end mark.
    fn next_block(&mut self) -> io::Result<bool> {
        if self.finished {
            return Ok(false);
        }
        let block_pos = self.pos;
        let raw = self.read_u32("block size")?;
        let size = (raw & !LZ4_INCOMPRESSIBLE_MASK) as usize;
        if size == 0 {
            self.finished = true;
            if self.content_checksum {
                // Kafka reads the content checksum but does not verify it.
                self.read_u32("content checksum")?;
            }
            return Ok(false);
        }
        if size > self.max_block {
            return Err(invalid(format!(
                "LZ4 block at byte {block_pos} is {size} bytes, above the frame's maximum {}",
                self.max_block
            )));
        }
        let Some(block) = self.data.get(self.pos..self.pos + size) else {
            return Err(self.premature("block data"));
        };
        self.pos += size;
        if self.block_checksum {
            let stored = self.read_u32("block checksum")?;
            let computed = twox_hash::XxHash32::oneshot(0, block);
            if stored != computed {
                return Err(invalid(format!("LZ4 block checksum mismatch at byte {block_pos}")));
            }
        }
        if raw & LZ4_INCOMPRESSIBLE_MASK != 0 {
            self.stored = true;
            self.start = self.pos - size - if self.block_checksum { 4 } else { 0 };
            self.end = self.start + size;
        } else {
            if self.buf.len() < self.max_block {
                self.buf.resize(self.max_block, 0);
            }
            let n = lz4_flex::block::decompress_into(block, &mut self.buf)
                .map_err(|e| invalid(format!("LZ4 block at byte {block_pos}: {e}")))?;
            self.stored = false;
            self.start = 0;
            self.end = n;
        }
        Ok(true)
    }
}

impl Read for Lz4Reader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        while self.start >= self.end {
            if !self.next_block()? {
                return Ok(0);
            }
        }
        let src = if self.stored { self.data } else { &self.buf[..] };
        let avail = src.get(self.start..self.end).unwrap_or_default();
        let n = avail.len().min(out.len());
        out[..n].copy_from_slice(&avail[..n]);
        self.start += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decompress_all(codec: Compression, data: &[u8], magic: i8) -> Result<Vec<u8>, String> {
        let opts = DecompressOptions {
            magic,
            ..DecompressOptions::default()
        };
        let mut r = decompressing_reader_with(codec, data, opts).map_err(|d| d.to_string())?;
        let mut out = Vec::new();
        r.read_to_end(&mut out).map_err(|e| e.to_string())?;
        Ok(out)
    }

    fn sample(len: usize) -> Vec<u8> {
        (0..len).map(|i| ((i * 7) % 251) as u8 ^ ((i / 1000) as u8)).collect()
    }

    #[test]
    fn every_codec_round_trips_across_block_boundaries() {
        for len in [0, 1, 100, 32 * 1024, 64 * 1024, 64 * 1024 + 1, 300_000] {
            let data = sample(len);
            for codec in Compression::ALL {
                for magic in [0i8, 1, 2] {
                    let c = compress_for_magic(codec, &data, magic);
                    let back = decompress_all(codec, &c, magic).unwrap();
                    assert_eq!(back, data, "{codec:?} magic {magic} len {len}");
                }
            }
        }
    }

    #[test]
    fn snappy_xerial_layout() {
        let data = sample(70_000);
        let c = compress(Compression::Snappy, &data);
        assert_eq!(&c[..8], &SNAPPY_XERIAL_MAGIC);
        assert_eq!(&c[8..16], &[0, 0, 0, 1, 0, 0, 0, 1]);
        // Three blocks of <= 32 KiB input, each [i32 BE len][raw snappy].
        let mut pos = 16;
        let mut total = 0;
        let mut blocks = 0;
        while pos < c.len() {
            let n = i32::from_be_bytes(c[pos..pos + 4].try_into().unwrap()) as usize;
            let block = &c[pos + 4..pos + 4 + n];
            let out = snap::raw::Decoder::new().decompress_vec(block).unwrap();
            assert!(out.len() <= 32 * 1024);
            total += out.len();
            pos += 4 + n;
            blocks += 1;
        }
        assert_eq!((blocks, total), (3, data.len()));
        // Empty input: header only, like SnappyOutputStream.close().
        assert_eq!(compress(Compression::Snappy, &[]).len(), 16);
    }

    #[test]
    fn snappy_accepts_unframed_and_concatenated() {
        let data = sample(5000);
        let raw = snap::raw::Encoder::new().compress_vec(&data).unwrap();
        assert_eq!(decompress_all(Compression::Snappy, &raw, 2).unwrap(), data);
        let mut two = compress(Compression::Snappy, &data[..2000]);
        two.extend_from_slice(&compress(Compression::Snappy, &data[2000..]));
        assert_eq!(decompress_all(Compression::Snappy, &two, 2).unwrap(), data);
        // Java ignores 1..=3 trailing bytes after the last chunk.
        let mut tail = compress(Compression::Snappy, &data);
        tail.extend_from_slice(&[1, 2, 3]);
        assert_eq!(decompress_all(Compression::Snappy, &tail, 2).unwrap(), data);
    }

    #[test]
    fn snappy_rejects_huge_claims_without_allocating() {
        // Varint length 0xFFFFFFFF then garbage: must be refused by the cap.
        let hostile = [0xff, 0xff, 0xff, 0xff, 0x0f, 0, 1, 2];
        let err = decompress_all(Compression::Snappy, &hostile, 2).unwrap_err();
        assert!(err.contains("above the limit"), "{err}");
        let mut framed = compress(Compression::Snappy, &[]);
        framed.extend_from_slice(&(-5i32).to_be_bytes());
        assert!(decompress_all(Compression::Snappy, &framed, 2)
            .unwrap_err()
            .contains("invalid snappy chunk size"));
        let mut cut = compress(Compression::Snappy, &sample(1000));
        cut.truncate(cut.len() - 1);
        assert!(decompress_all(Compression::Snappy, &cut, 2).is_err());
    }

    #[test]
    fn lz4_frame_layout_matches_kafka_writer() {
        let c = compress(Compression::Lz4, b"hello hello hello hello");
        assert_eq!(&c[..4], &[0x04, 0x22, 0x4d, 0x18]);
        assert_eq!(c[4], 0x60, "FLG: version 1, independent blocks, no checksums");
        assert_eq!(c[5], 0x40, "BD: 64 KiB blocks");
        assert_eq!(
            c[6],
            ((twox_hash::XxHash32::oneshot(0, &[0x60, 0x40]) >> 8) & 0xff) as u8
        );
        assert_eq!(&c[c.len() - 4..], &[0, 0, 0, 0], "end mark, no content checksum");
        let broken = compress_for_magic(Compression::Lz4, b"x", 0);
        assert_eq!(
            broken[6],
            ((twox_hash::XxHash32::oneshot(0, &broken[..6]) >> 8) & 0xff) as u8
        );
    }

    #[test]
    fn lz4_header_checksum_rules_per_magic() {
        let data = sample(1000);
        let broken = compress_for_magic(Compression::Lz4, &data, 0);
        assert_eq!(decompress_all(Compression::Lz4, &broken, 0).unwrap(), data);
        let err = decompress_all(Compression::Lz4, &broken, 1).unwrap_err();
        assert!(err.contains("descriptor"), "{err}");
        // Magic 0 ignores the byte entirely.
        let mut any = compress(Compression::Lz4, &data);
        any[6] ^= 0x55;
        assert_eq!(decompress_all(Compression::Lz4, &any, 0).unwrap(), data);
        assert!(decompress_all(Compression::Lz4, &any, 2).is_err());
    }

    #[test]
    fn lz4_rejects_what_kafka_rejects_and_reads_what_it_reads() {
        let data = sample(1000);
        let good = compress(Compression::Lz4, &data);
        let with_flg = |flg: u8| {
            let mut v = good.clone();
            v[4] = flg;
            v[6] = lz4_header_checksum(&v[..6], false);
            v
        };
        assert!(decompress_all(Compression::Lz4, &with_flg(0x40), 2)
            .unwrap_err()
            .contains("dependent"));
        assert!(
            decompress_all(Compression::Lz4, &with_flg(0x61), 2).is_err(),
            "dictionary id"
        );
        assert!(
            decompress_all(Compression::Lz4, &with_flg(0xa0), 2).is_err(),
            "version 2"
        );
        // Content checksum flag: 4 bytes after the end mark are read, not verified.
        let mut cc = with_flg(0x64);
        cc.extend_from_slice(&[9, 9, 9, 9]);
        assert_eq!(decompress_all(Compression::Lz4, &cc, 2).unwrap(), data);
        let cc_missing = with_flg(0x64);
        assert!(decompress_all(Compression::Lz4, &cc_missing, 2).is_err());
        // Block checksums are verified.
        let mut bc = vec![];
        bc.extend_from_slice(&LZ4_FRAME_MAGIC.to_le_bytes());
        bc.extend_from_slice(&[0x70, 0x40]);
        bc.push(lz4_header_checksum(&bc, false));
        let block = lz4_flex::block::compress(&data);
        bc.extend_from_slice(&(block.len() as u32).to_le_bytes());
        bc.extend_from_slice(&block);
        bc.extend_from_slice(&twox_hash::XxHash32::oneshot(0, &block).to_le_bytes());
        bc.extend_from_slice(&0u32.to_le_bytes());
        assert_eq!(decompress_all(Compression::Lz4, &bc, 2).unwrap(), data);
        let n = bc.len();
        bc[n - 6] ^= 1;
        assert!(decompress_all(Compression::Lz4, &bc, 2)
            .unwrap_err()
            .contains("checksum"));
        // Missing end mark is a truncation.
        assert!(decompress_all(Compression::Lz4, &good[..good.len() - 4], 2).is_err());
    }

    #[test]
    fn zstd_window_is_capped() {
        // A frame header demanding a 2^31 window: Window_Descriptor exponent 21 -> 2^(10+21).
        let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, (21 << 3) as u8];
        frame.extend_from_slice(&[0x01, 0x00, 0x00]); // last raw block of 0 bytes
        assert!(decompress_all(Compression::Zstd, &frame, 2).is_err());
        let mut ok = vec![0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x00];
        ok.extend_from_slice(&[0x01, 0x00, 0x00]);
        assert_eq!(decompress_all(Compression::Zstd, &ok, 2).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn truncated_streams_are_errors() {
        let data = sample(100_000);
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let c = compress(codec, &data);
            for cut in [c.len() / 2, c.len() - 1] {
                let r = decompress_all(codec, &c[..cut], 2);
                assert!(r.is_err(), "{codec:?} cut at {cut} of {}", c.len());
            }
        }
    }

    proptest! {
        #[test]
        fn round_trip_random(data in proptest::collection::vec(any::<u8>(), 0..5000), codec_id in 0u8..5) {
            let codec = Compression::from_id(codec_id).unwrap();
            let c = compress(codec, &data);
            prop_assert_eq!(decompress_all(codec, &c, 2).unwrap(), data);
        }

        #[test]
        fn hostile_streams_never_panic(data in proptest::collection::vec(any::<u8>(), 0..400), codec_id in 1u8..5,
                                       magic in 0i8..3) {
            let codec = Compression::from_id(codec_id).unwrap();
            let _ = decompress_all(codec, &data, magic);
        }

        #[test]
        fn mutated_streams_never_panic(len in 0usize..3000, codec_id in 1u8..5, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
            let codec = Compression::from_id(codec_id).unwrap();
            let mut c = compress(codec, &sample(len));
            for (at, x) in flips {
                let n = c.len();
                c[at % n] ^= x;
            }
            let _ = decompress_all(codec, &c, 2);
        }
    }
}
