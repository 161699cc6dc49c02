//! The deep walk over the records of one magic-2 batch ([`for_each_record`]).
//!
//! Kept apart from the encoder because this is the half that faces hostile bytes:
//! every length is checked against the bytes actually present before it is used,
//! and the records of a compressed batch stream through one bounded buffer.

use std::io::{BufRead, BufReader, Read};
use std::ops::ControlFlow;

use super::{DeepLimits, RecordSpec, STREAM_BUFFER_BYTES};
use crate::batch::{
    increment_sequence, parse_header, BatchHeader, Compression, TimestampType, NO_SEQUENCE, RECORD_BATCH_OVERHEAD,
};
use crate::compression;
use crate::error::{Defect, ParseError};
use crate::varint::{read_varint, read_varlong};

/// One header of a record, borrowed from the batch (or the decompression buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderView<'a> {
    pub key: &'a str,
    pub value: Option<&'a [u8]>,
}

/// Iterator over a validated header block.
#[derive(Debug, Clone)]
pub struct HeaderIter<'a> {
    cursor: Cursor<'a>,
    remaining: usize,
}

impl<'a> Iterator for HeaderIter<'a> {
    type Item = HeaderView<'a>;

    fn next(&mut self) -> Option<HeaderView<'a>> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        // The block was validated when the record was parsed; failures here are
        // impossible, and end the iteration rather than panic.
        match self.cursor.header() {
            Ok(h) => Some(h),
            Err(_) => {
                self.remaining = 0;
                None
            }
        }
    }
}

/// One record as the walker sees it. Borrowed: copy what you keep.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    /// 0-based index in the batch.
    pub index: i32,
    /// Byte position of the record's length varint: within the batch for an
    /// uncompressed batch, within the decompressed stream otherwise.
    pub position: u64,
    /// True when `position` is in the decompressed stream.
    pub compressed: bool,
    /// Bytes the record occupies, length varint included.
    pub size_in_bytes: usize,
    /// Record attributes byte (unused by Kafka, written as 0).
    pub attributes: i8,
    pub timestamp_delta: i64,
    pub offset_delta: i32,
    /// `baseOffset + offsetDelta`.
    pub offset: i64,
    /// `baseTimestamp + timestampDelta`, or the batch `maxTimestamp` for LogAppendTime.
    pub timestamp: i64,
    /// `baseSequence + offsetDelta` (wrapping), or -1 without a base sequence.
    pub sequence: i32,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    header_count: usize,
    header_bytes: &'a [u8],
}

impl<'a> RecordView<'a> {
    pub fn header_count(&self) -> usize {
        self.header_count
    }

    pub fn headers(&self) -> HeaderIter<'a> {
        HeaderIter {
            cursor: Cursor {
                buf: self.header_bytes,
                pos: 0,
            },
            remaining: self.header_count,
        }
    }

    /// An owned copy as a [`RecordSpec`] (timestamp = base + delta, so a
    /// LogAppendTime batch round-trips to the timestamps it was built from).
    pub fn to_spec(&self, base_timestamp: i64) -> RecordSpec {
        RecordSpec {
            offset_delta: self.offset_delta,
            timestamp: base_timestamp.wrapping_add(self.timestamp_delta),
            key: self.key.map(<[u8]>::to_vec),
            value: self.value.map(<[u8]>::to_vec),
            headers: self
                .headers()
                .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
                .collect(),
        }
    }
}

/// What a walk found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecordStats {
    /// Records walked (all of them unless the callback stopped early).
    pub records: u32,
    pub first_offset_delta: Option<i32>,
    pub last_offset_delta: Option<i32>,
    /// Largest record timestamp (as [`RecordView::timestamp`]).
    pub max_timestamp: Option<i64>,
    /// Bytes of the records, uncompressed.
    pub uncompressed_bytes: u64,
    /// The callback returned `Break`; later records were not checked.
    pub stopped_early: bool,
}

/// A field problem inside one record body: position relative to the body.
#[derive(Debug)]
struct FieldError {
    at: usize,
    message: String,
}

#[derive(Debug, Clone)]
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    fn fail<T>(&self, message: String) -> Result<T, FieldError> {
        Err(FieldError { at: self.pos, message })
    }

    fn byte(&mut self, field: &str) -> Result<u8, FieldError> {
        match self.rest().first() {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => self.fail(format!("record ends before its {field}")),
        }
    }

    fn varint(&mut self, field: &str) -> Result<i32, FieldError> {
        match read_varint(self.rest()) {
            Some((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            None => self.fail(format!("{field}: truncated or over-long varint")),
        }
    }

    fn varlong(&mut self, field: &str) -> Result<i64, FieldError> {
        match read_varlong(self.rest()) {
            Some((v, n)) => {
                self.pos += n;
                Ok(v)
            }
            None => self.fail(format!("{field}: truncated or over-long varlong")),
        }
    }

    /// A length-prefixed byte string; `nullable` allows -1.
    fn bytes(&mut self, field: &str, nullable: bool) -> Result<Option<&'a [u8]>, FieldError> {
        let at = self.pos;
        let len = self.varint(field)?;
        if len == -1 && nullable {
            return Ok(None);
        }
        if len < 0 {
            self.pos = at;
            return self.fail(format!("{field} length {len} is negative"));
        }
        let rest = self.rest();
        match rest.get(..len as usize) {
            Some(b) => {
                self.pos += len as usize;
                Ok(Some(b))
            }
            None => {
                self.pos = at;
                self.fail(format!(
                    "{field} length {len} exceeds the {} bytes left in the record",
                    rest.len()
                ))
            }
        }
    }

    fn header(&mut self) -> Result<HeaderView<'a>, FieldError> {
        let at = self.pos;
        let key = self.bytes("header key", false)?.unwrap_or_default();
        let key = match std::str::from_utf8(key) {
            Ok(k) => k,
            Err(e) => {
                self.pos = at;
                return self.fail(format!("header key is not valid UTF-8: {e}"));
            }
        };
        let value = self.bytes("header value", true)?;
        Ok(HeaderView { key, value })
    }
}

/// The fields of one record body (the bytes after its length varint).
struct Body<'a> {
    attributes: i8,
    timestamp_delta: i64,
    offset_delta: i32,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    header_count: usize,
    header_bytes: &'a [u8],
}

/// Parse a record body. The offset delta is returned as soon as it is known so
/// errors after it can name the record's offset.
fn parse_body<'a>(body: &'a [u8], offset_delta_out: &mut Option<i32>) -> Result<Body<'a>, FieldError> {
    let mut c = Cursor { buf: body, pos: 0 };
    let attributes = c.byte("attributes")? as i8;
    let timestamp_delta = c.varlong("timestamp delta")?;
    let offset_delta = c.varint("offset delta")?;
    *offset_delta_out = Some(offset_delta);
    let key = c.bytes("key", true)?;
    let value = c.bytes("value", true)?;
    let count_at = c.pos;
    let count = c.varint("header count")?;
    if count < 0 {
        c.pos = count_at;
        return c.fail(format!("header count {count} is negative"));
    }
    // As Kafka: every header needs at least one byte, so a larger count is corrupt.
    if count as usize > c.rest().len() {
        c.pos = count_at;
        return c.fail(format!(
            "header count {count} exceeds the {} bytes left in the record",
            c.rest().len()
        ));
    }
    let headers_start = c.pos;
    for _ in 0..count {
        c.header()?;
    }
    let header_bytes = body.get(headers_start..c.pos).unwrap_or_default();
    if c.pos != body.len() {
        return c.fail(format!(
            "record length says {} bytes but its fields end after {}",
            body.len(),
            c.pos
        ));
    }
    Ok(Body {
        attributes,
        timestamp_delta,
        offset_delta,
        key,
        value,
        header_count: count as usize,
        header_bytes,
    })
}

/// Batch-level state of one walk: the checks that relate records to the header.
struct Walk<'h> {
    header: &'h BatchHeader,
    compressed: bool,
    stats: RecordStats,
    prev_delta: Option<i32>,
}

impl Walk<'_> {
    /// Error for a record whose problem is at `stream_pos` (batch position
    /// for uncompressed data, decompressed-stream position otherwise).
    fn error(&self, stream_pos: u64, offset_delta: Option<i32>, defect: Defect) -> ParseError {
        let offset = Some(match offset_delta {
            Some(d) => self.header.base_offset.wrapping_add(i64::from(d)),
            None => self.header.base_offset,
        });
        if self.compressed {
            let defect = match defect {
                Defect::MalformedRecord { message } => Defect::MalformedRecord {
                    message: format!("{message} (byte {stream_pos} of the decompressed records)"),
                },
                other => other,
            };
            ParseError::Corrupt {
                position: 0,
                offset,
                defect,
            }
        } else {
            ParseError::Corrupt {
                position: stream_pos,
                offset,
                defect,
            }
        }
    }

    fn malformed(&self, index: i32, stream_pos: u64, offset_delta: Option<i32>, message: String) -> ParseError {
        self.error(
            stream_pos,
            offset_delta,
            Defect::MalformedRecord {
                message: format!("record {index}: {message}"),
            },
        )
    }

    /// Parse and check one record body, then hand it to `f`.
    fn record<F>(
        &mut self,
        index: i32,
        position: u64,
        varint_len: usize,
        body: &[u8],
        f: &mut F,
    ) -> Result<ControlFlow<()>, ParseError>
    where
        F: FnMut(&RecordView<'_>) -> ControlFlow<()>,
    {
        let body_pos = position + varint_len as u64;
        let mut delta_seen = None;
        let b = parse_body(body, &mut delta_seen)
            .map_err(|e| self.malformed(index, body_pos + e.at as u64, delta_seen, e.message))?;
        let h = self.header;
        let delta = b.offset_delta;
        if delta < 0 {
            return Err(self.malformed(
                index,
                position,
                Some(delta),
                format!("offset delta {delta} is negative"),
            ));
        }
        if let Some(prev) = self.prev_delta {
            if delta <= prev {
                return Err(self.error(
                    position,
                    Some(delta),
                    Defect::OffsetOutOfOrder {
                        previous: h.base_offset.wrapping_add(i64::from(prev)),
                        found: h.base_offset.wrapping_add(i64::from(delta)),
                    },
                ));
            }
        }
        if delta > h.last_offset_delta {
            return Err(self.malformed(
                index,
                position,
                Some(delta),
                format!(
                    "offset delta {delta} exceeds the batch's lastOffsetDelta {}",
                    h.last_offset_delta
                ),
            ));
        }
        let timestamp = match h.attributes.timestamp_type() {
            TimestampType::LogAppendTime => h.max_timestamp,
            TimestampType::CreateTime => h.base_timestamp.wrapping_add(b.timestamp_delta),
        };
        if h.attributes.timestamp_type() == TimestampType::CreateTime && timestamp > h.max_timestamp {
            return Err(self.malformed(
                index,
                position,
                Some(delta),
                format!(
                    "timestamp {timestamp} exceeds the batch's maxTimestamp {}",
                    h.max_timestamp
                ),
            ));
        }
        let view = RecordView {
            index,
            position,
            compressed: self.compressed,
            size_in_bytes: varint_len + body.len(),
            attributes: b.attributes,
            timestamp_delta: b.timestamp_delta,
            offset_delta: delta,
            offset: h.base_offset.wrapping_add(i64::from(delta)),
            timestamp,
            sequence: if h.base_sequence >= 0 {
                increment_sequence(h.base_sequence, delta)
            } else {
                NO_SEQUENCE
            },
            key: b.key,
            value: b.value,
            header_count: b.header_count,
            header_bytes: b.header_bytes,
        };
        self.prev_delta = Some(delta);
        let s = &mut self.stats;
        s.records += 1;
        s.first_offset_delta.get_or_insert(delta);
        s.last_offset_delta = Some(delta);
        s.max_timestamp = Some(s.max_timestamp.map_or(timestamp, |m| m.max(timestamp)));
        s.uncompressed_bytes += view.size_in_bytes as u64;
        Ok(f(&view))
    }

    fn count_mismatch(&self, position: u64, found: i64) -> ParseError {
        let defect = Defect::RecordCountMismatch {
            header: i64::from(self.header.records_count),
            found,
        };
        ParseError::Corrupt {
            position: if self.compressed { 0 } else { position },
            offset: Some(self.header.base_offset),
            defect,
        }
    }
}

/// Walk every record of a magic-2 batch, decompressing (streaming) if needed, and
/// check it deeply. `batch` starts at the batch (it may extend past it); positions
/// in errors are relative to it: the failing field for an uncompressed batch, 0
/// for a compressed one (the message then names the record index and the byte in
/// the decompressed stream). The error's offset is the record's offset once its
/// offset delta is read, else the batch base offset.
///
/// Checks: record length consistent with the fields; key/value lengths >= -1 and
/// inside the record; header count >= 0; header keys present and valid UTF-8;
/// offset deltas >= 0, strictly increasing and <= lastOffsetDelta; the number of
/// records equals `records_count`; no bytes after the last record (uncompressed) /
/// the compressed stream ends cleanly after it; for CreateTime batches no record
/// timestamp above `maxTimestamp`. It does not check the CRC (see
/// [`crate::batch::verify_crc`]). The callback may stop the walk with `Break`.
pub fn for_each_record<F>(
    batch: &[u8],
    header: &BatchHeader,
    limits: &DeepLimits,
    mut f: F,
) -> Result<RecordStats, ParseError>
where
    F: FnMut(&RecordView<'_>) -> ControlFlow<()>,
{
    let size = header.size_in_bytes();
    let Some(batch) = batch.get(..size) else {
        return Err(ParseError::Incomplete {
            position: 0,
            offset: Some(header.base_offset),
            needed: size as u64,
            available: batch.len() as u64,
        });
    };
    if header.records_count < 0 {
        return Err(ParseError::Corrupt {
            position: 57,
            offset: Some(header.base_offset),
            defect: Defect::BadLength {
                field: "records count",
                value: i64::from(header.records_count),
            },
        });
    }
    let payload = batch.get(RECORD_BATCH_OVERHEAD..).unwrap_or_default();
    let Some(codec) = header.attributes.compression() else {
        return Err(ParseError::Corrupt {
            position: 21,
            offset: Some(header.base_offset),
            defect: Defect::UnknownCodec {
                codec: header.attributes.codec_id(),
            },
        });
    };
    let mut walk = Walk {
        header,
        compressed: codec != Compression::None,
        stats: RecordStats::default(),
        prev_delta: None,
    };
    if codec == Compression::None {
        walk_slice(&mut walk, payload, &mut f)?;
    } else if !(payload.is_empty() && header.records_count == 0) {
        let decompressor = compression::decompressing_reader_with(codec, payload, limits.decompress_options(2))
            .map_err(|defect| ParseError::Corrupt {
                position: 0,
                offset: Some(header.base_offset),
                defect,
            })?;
        walk_stream(&mut walk, codec, decompressor, limits, &mut f)?;
    }
    Ok(walk.stats)
}

/// Records laid out in `payload` (the batch bytes after the 61-byte header).
fn walk_slice<F>(walk: &mut Walk<'_>, payload: &[u8], f: &mut F) -> Result<(), ParseError>
where
    F: FnMut(&RecordView<'_>) -> ControlFlow<()>,
{
    let base = RECORD_BATCH_OVERHEAD as u64;
    let mut pos = 0usize;
    let count = walk.header.records_count;
    for index in 0..count {
        let rest = payload.get(pos..).unwrap_or_default();
        let position = base + pos as u64;
        if rest.is_empty() {
            return Err(walk.count_mismatch(position, i64::from(index)));
        }
        let (body, varint_len) = slice_record(walk, index, position, rest)?;
        if walk.record(index, position, varint_len, body, f)?.is_break() {
            walk.stats.stopped_early = true;
            return Ok(());
        }
        pos += varint_len + body.len();
    }
    if pos < payload.len() {
        let position = base + pos as u64;
        let extra = count_extra_slice(payload.get(pos..).unwrap_or_default());
        return Err(match extra {
            Some(n) => walk.count_mismatch(position, i64::from(count) + n),
            None => walk.malformed(
                count,
                position,
                None,
                format!(
                    "{} bytes after the last of the {count} records the header declares",
                    payload.len() - pos
                ),
            ),
        });
    }
    Ok(())
}

/// Split the next record off `rest`: (body, length-varint size).
fn slice_record<'a>(
    walk: &Walk<'_>,
    index: i32,
    position: u64,
    rest: &'a [u8],
) -> Result<(&'a [u8], usize), ParseError> {
    let Some((len, n)) = read_varint(rest) else {
        return Err(walk.malformed(
            index,
            position,
            None,
            "record length: truncated or over-long varint".into(),
        ));
    };
    if len < 0 {
        return Err(walk.malformed(index, position, None, format!("record length {len} is negative")));
    }
    match rest.get(n..n + len as usize) {
        Some(body) => Ok((body, n)),
        None => Err(walk.malformed(
            index,
            position,
            None,
            format!(
                "record length {len} exceeds the {} bytes left in the batch",
                rest.len() - n
            ),
        )),
    }
}

/// If `rest` is a clean sequence of well-formed records, how many.
fn count_extra_slice(mut rest: &[u8]) -> Option<i64> {
    let mut n = 0;
    while !rest.is_empty() {
        let (len, k) = read_varint(rest)?;
        let body = rest.get(k..k + usize::try_from(len).ok()?)?;
        parse_body(body, &mut None).ok()?;
        rest = &rest[k + body.len()..];
        n += 1;
    }
    Some(n)
}

/// The outcome of reading one record from a stream.
enum Next {
    /// Clean end of stream before a record started.
    End,
    /// Body read into the buffer; the usize is the length-varint size.
    Record(usize),
}

/// Read the next record's length and body from a decompressed stream.
fn read_stream_record<R: BufRead>(
    walk: &Walk<'_>,
    codec: Compression,
    reader: &mut R,
    index: i32,
    position: u64,
    limits: &DeepLimits,
    buf: &mut Vec<u8>,
) -> Result<Next, ParseError> {
    let io_err = |e: std::io::Error| ParseError::Corrupt {
        position: 0,
        offset: Some(walk.header.base_offset),
        defect: compression::read_error_defect(codec, &e),
    };
    let mut varint = [0u8; 5];
    let mut n = 0;
    loop {
        let available = reader.fill_buf().map_err(io_err)?;
        let Some(&b) = available.first() else {
            if n == 0 {
                return Ok(Next::End);
            }
            return Err(walk.malformed(index, position, None, "stream ends inside a record length".into()));
        };
        reader.consume(1);
        varint[n] = b;
        n += 1;
        if b & 0x80 == 0 || n == varint.len() {
            break;
        }
    }
    let Some((len, _)) = read_varint(&varint[..n]) else {
        return Err(walk.malformed(index, position, None, "record length: over-long varint".into()));
    };
    if len < 0 {
        return Err(walk.malformed(index, position, None, format!("record length {len} is negative")));
    }
    if len as usize > limits.max_record_bytes {
        return Err(walk.error(
            position,
            None,
            Defect::BadLength {
                field: "record length (above the deep-validation limit)",
                value: i64::from(len),
            },
        ));
    }
    buf.clear();
    // Grows with the bytes actually read, never to a claimed length up front.
    let got = reader.take(len as u64).read_to_end(buf).map_err(io_err)?;
    if got < len as usize {
        return Err(walk.malformed(
            index,
            position,
            None,
            format!("record length {len} but the stream ends after {got} bytes"),
        ));
    }
    Ok(Next::Record(n))
}

fn walk_stream<F>(
    walk: &mut Walk<'_>,
    codec: Compression,
    decompressor: compression::Decompressor<'_>,
    limits: &DeepLimits,
    f: &mut F,
) -> Result<(), ParseError>
where
    F: FnMut(&RecordView<'_>) -> ControlFlow<()>,
{
    let mut reader = BufReader::with_capacity(STREAM_BUFFER_BYTES, decompressor);
    let mut buf = Vec::new();
    let mut position = 0u64;
    let count = walk.header.records_count;
    for index in 0..count {
        match read_stream_record(walk, codec, &mut reader, index, position, limits, &mut buf)? {
            Next::End => return Err(walk.count_mismatch(0, i64::from(index))),
            Next::Record(varint_len) => {
                if walk.record(index, position, varint_len, &buf, f)?.is_break() {
                    walk.stats.stopped_early = true;
                    return Ok(());
                }
                position += (varint_len + buf.len()) as u64;
            }
        }
    }
    // The stream must end here; reading to its end also makes the codec check its
    // trailer (gzip CRC, LZ4 end mark, zstd frame end).
    let mut extra = 0i64;
    let trailing_start = position;
    loop {
        match read_stream_record(walk, codec, &mut reader, count, position, limits, &mut buf) {
            Ok(Next::End) if extra == 0 => return Ok(()),
            Ok(Next::End) => return Err(walk.count_mismatch(0, i64::from(count) + extra)),
            Ok(Next::Record(varint_len)) if parse_body(&buf, &mut None).is_ok() => {
                extra += 1;
                position += (varint_len + buf.len()) as u64;
            }
            Err(
                e @ ParseError::Corrupt {
                    defect: Defect::Decompression { .. },
                    ..
                },
            ) => return Err(e),
            _ => {
                return Err(walk.malformed(
                    count,
                    trailing_start,
                    None,
                    format!(
                        "the decompressed stream continues after the last of the {count} records the header declares"
                    ),
                ))
            }
        }
    }
}

/// Parse the batch header of `batch` and collect every record as a [`RecordSpec`].
/// For tests and tools; memory grows with the records.
pub fn read_records(batch: &[u8], limits: &DeepLimits) -> Result<(BatchHeader, Vec<RecordSpec>), ParseError> {
    let header = parse_header(batch)?;
    let mut out = Vec::new();
    for_each_record(batch, &header, limits, |r| {
        out.push(r.to_spec(header.base_timestamp));
        ControlFlow::Continue(())
    })?;
    Ok((header, out))
}

#[cfg(test)]
#[path = "walk_tests.rs"]
mod tests;
