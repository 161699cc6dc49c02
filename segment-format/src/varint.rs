//! Zig-zag varints and varlongs as Kafka encodes record fields
//! (`ByteUtils.readVarint` / `writeVarint` in Kafka's clients).
//!
//! Decoders take a slice and return the value and the number of bytes used, or
//! `None` if the slice ends mid-varint or the varint is longer than its type allows
//! (5 bytes for 32-bit, 10 for 64-bit) — never a panic on hostile input.

/// Decode a zig-zag varint (i32). Returns (value, bytes consumed).
pub fn read_varint(buf: &[u8]) -> Option<(i32, usize)> {
    let mut raw: u32 = 0;
    for (i, &b) in buf.iter().enumerate().take(5) {
        if i == 4 && b & 0xf0 != 0 {
            return None;
        }
        raw |= u32::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((((raw >> 1) as i32) ^ -((raw & 1) as i32), i + 1));
        }
    }
    None
}

/// Decode a zig-zag varlong (i64). Returns (value, bytes consumed).
pub fn read_varlong(buf: &[u8]) -> Option<(i64, usize)> {
    let mut raw: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(10) {
        if i == 9 && b & 0xfe != 0 {
            return None;
        }
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((((raw >> 1) as i64) ^ -((raw & 1) as i64), i + 1));
        }
    }
    None
}

/// Append a zig-zag varint.
pub fn write_varint(out: &mut Vec<u8>, value: i32) {
    let mut v = ((value << 1) ^ (value >> 31)) as u32;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Append a zig-zag varlong.
pub fn write_varlong(out: &mut Vec<u8>, value: i64) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Encoded size of a zig-zag varint.
pub fn varint_size(value: i32) -> usize {
    let v = ((value << 1) ^ (value >> 31)) as u32;
    (32 - v.leading_zeros() as usize).max(1).div_ceil(7)
}

/// Encoded size of a zig-zag varlong.
pub fn varlong_size(value: i64) -> usize {
    let v = ((value << 1) ^ (value >> 63)) as u64;
    (64 - v.leading_zeros() as usize).max(1).div_ceil(7)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varint_round_trip(v in any::<i32>()) {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            prop_assert_eq!(out.len(), varint_size(v));
            prop_assert_eq!(read_varint(&out), Some((v, out.len())));
        }

        #[test]
        fn varlong_round_trip(v in any::<i64>()) {
            let mut out = Vec::new();
            write_varlong(&mut out, v);
            prop_assert_eq!(out.len(), varlong_size(v));
            prop_assert_eq!(read_varlong(&out), Some((v, out.len())));
        }

        #[test]
        fn hostile_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..12)) {
            let _ = read_varint(&bytes);
            let _ = read_varlong(&bytes);
        }
    }

    #[test]
    fn known_encodings() {
        // Kafka: 0 -> 00, -1 -> 01, 1 -> 02, 63 -> 7e, -64 -> 7f, 64 -> 80 01
        for (v, bytes) in [
            (0, vec![0u8]),
            (-1, vec![1]),
            (1, vec![2]),
            (63, vec![0x7e]),
            (-64, vec![0x7f]),
            (64, vec![0x80, 1]),
        ] {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            assert_eq!(out, bytes, "value {v}");
        }
        assert_eq!(read_varint(&[0x80, 0x80, 0x80, 0x80, 0x80]), None, "too long");
        assert_eq!(read_varint(&[0x80]), None, "truncated");
    }
}
