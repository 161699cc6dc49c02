//! CRC-32C of byte runs made of pieces whose CRCs are known, without reading the pieces again.
//!
//! Why: a Kafka v2 batch carries the CRC-32C of its bytes from the attributes on, and every reader checks it; the
//! CRC of a whole run of batches (a chunk's, a segment prefix's, a frame's) then follows from those by combining
//! (carry-less multiplication by `x^(8n)` modulo the polynomial, as zlib's `crc32_combine`), so a byte is hashed
//! once, not once per check. The combine is by a table of powers (a few multiplications), because the `crc32c`
//! crate's own combine costs about what hashing 150 KiB does.

use crate::batch::ATTRIBUTES_OFFSET;
use crate::log::Frame;

/// The CRC-32C of a run of whole frames, extended frame by frame from the CRCs
/// the scan computes anyway. A magic-2 batch's own CRC is the CRC-32C of its
/// bytes from the attributes on; combined with that of the 21 bytes before it,
/// it gives the frame's without reading the frame again. A combine costs a few
/// carry-less multiplications in software (one when the frame has the length
/// of the one before, as bulk data does; see [`crc32c_shift_operator`]),
/// which is more than the CPU's CRC instruction takes over a small frame: a
/// frame under [`COMBINE_MIN_FRAME_BYTES`], and a legacy message (its CRC is a
/// CRC-32, not C), is hashed again instead.
#[derive(Debug, Default)]
pub struct PrefixCrc {
    crc: u32,
    /// The last frame length shifted over, and its operator: bulk data repeats lengths.
    shift: Option<(usize, u32)>,
}

/// Frames at least this long have their CRC combined rather than hashed again.
/// Measured on this project's machine (AMD EPYC, `crc32c` with SSE 4.2, a
/// loaded machine): hashing ~0.09 ns/byte (1 KiB: 90 ns, 4 KiB: 355 ns, 16 KiB:
/// 1.2 µs), a combine with a new length 0.17-0.34 µs, with the last length
/// 0.03-0.09 µs, `crc32c::crc32c_combine` ~20 µs (`prefix_crc_costs`, an
/// ignored test in the shipper's `source::rebuild`).
pub const COMBINE_MIN_FRAME_BYTES: usize = 4096;

impl PrefixCrc {
    /// The CRC-32C of the frames appended so far.
    pub fn value(&self) -> u32 {
        self.crc
    }

    /// Append `frame` (whose CRC the scan found to match).
    pub fn append(&mut self, frame: &Frame<'_>) {
        let body_crc = (frame.info.magic >= 2).then_some(frame.computed_crc);
        self.append_parts(frame.bytes, body_crc);
    }

    /// Append a frame's `bytes`; `body_crc` is the CRC-32C of its bytes from
    /// [`ATTRIBUTES_OFFSET`] on, if known.
    pub fn append_parts(&mut self, bytes: &[u8], body_crc: Option<u32>) {
        let len = bytes.len();
        self.crc = match (bytes.split_at_checked(ATTRIBUTES_OFFSET), body_crc) {
            (Some((head, tail)), Some(body_crc)) if len >= COMBINE_MIN_FRAME_BYTES => {
                let frame_crc = crc32c_combine(crc32c::crc32c(head), body_crc, tail.len());
                let operator = match self.shift {
                    Some((cached, operator)) if cached == len => operator,
                    _ => {
                        let operator = crc32c_shift_operator(len);
                        self.shift = Some((len, operator));
                        operator
                    }
                };
                gf2_multiply(operator, self.crc) ^ frame_crc
            }
            _ => crc32c::crc32c_append(self.crc, bytes),
        };
    }
}

/// CRC-32C's polynomial, bit-reflected.
const CRC32C_POLY: u32 = 0x82F6_3B78;

/// `a * b` modulo the CRC-32C polynomial, in the bit-reflected representation
/// CRC-32C values use (the top bit is the coefficient of `x^0`).
pub const fn gf2_multiply(a: u32, mut b: u32) -> u32 {
    let mut product = 0u32;
    let mut bit = 0;
    while bit < 32 {
        if a & (0x8000_0000 >> bit) != 0 {
            product ^= b;
        }
        b = if b & 1 != 0 { (b >> 1) ^ CRC32C_POLY } else { b >> 1 };
        bit += 1;
    }
    product
}

/// `x^(8 * 2^k)` modulo the polynomial for every bit `k` of a length (zlib's
/// `x2n_table`, for bytes): built at compile time, so a shift by `n` bytes is
/// one multiplication per set bit of `n` instead of a square-and-multiply.
const SHIFT_BY_POWER_OF_TWO_BYTES: [u32; 64] = {
    let mut table = [0u32; 64];
    let mut power = 0x0080_0000; // x^8: one byte
    let mut k = 0;
    while k < 64 {
        table[k] = power;
        power = gf2_multiply(power, power);
        k += 1;
    }
    table
};

/// `x^(8 * bytes)` modulo the polynomial: multiplying a CRC by it appends
/// `bytes` zero bytes to the message the CRC is of.
pub fn crc32c_shift_operator(bytes: usize) -> u32 {
    let mut operator = 0x8000_0000; // x^0
    let mut n = bytes as u64;
    let mut k = 0;
    while n != 0 {
        if n & 1 != 0 {
            operator = gf2_multiply(SHIFT_BY_POWER_OF_TWO_BYTES[k], operator);
        }
        n >>= 1;
        k += 1;
    }
    operator
}

/// The CRC-32C of `A || B` from `crc(A)`, `crc(B)` and `|B|` (as zlib's
/// `crc32_combine`, by a table of powers rather than `crc32c`'s bit matrices,
/// which cost more than reading a 16 KiB batch).
pub fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: usize) -> u32 {
    gf2_multiply(crc32c_shift_operator(len_b), crc_a) ^ crc_b
}
