//! The field codecs of the direct protocol's payloads: [`Reader`] reads one payload's fields (every length checked
//! against the bytes present, every error naming the field and its absolute byte offset), [`Writer`] writes them,
//! refusing a value its encoding cannot carry. The frame codec (`frame::put`, `frame::read`) is their one user.

use bytes::{BufMut, Bytes, BytesMut};

use super::{PartitionRef, Position, Role, Sha256};
use crate::direct::error::FrameError;

/// Reads the fields of one payload; offsets in errors are absolute.
pub(crate) struct Reader {
    buf: Bytes,
    pos: usize,
    base: u64,
    frame: &'static str,
}

impl Reader {
    pub(crate) fn new(buf: Bytes, base: u64, frame: &'static str) -> Reader {
        Reader {
            buf,
            pos: 0,
            base,
            frame,
        }
    }

    fn err(&self, field: &'static str, reason: impl Into<String>) -> FrameError {
        FrameError::Field {
            frame: self.frame,
            field,
            offset: self.base + self.pos as u64,
            reason: reason.into(),
        }
    }

    fn take(&mut self, field: &'static str, n: usize) -> Result<Bytes, FrameError> {
        let left = self.buf.len() - self.pos;
        if n > left {
            return Err(self.err(field, format!("needs {n} bytes, {left} left in the payload")));
        }
        let out = self.buf.slice(self.pos..self.pos + n);
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], FrameError> {
        let bytes = self.take(field, N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(&bytes);
        Ok(out)
    }

    pub(crate) fn u8(&mut self, field: &'static str) -> Result<u8, FrameError> {
        Ok(self.array::<1>(field)?[0])
    }

    pub(crate) fn u16(&mut self, field: &'static str) -> Result<u16, FrameError> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }

    pub(crate) fn u32(&mut self, field: &'static str) -> Result<u32, FrameError> {
        Ok(u32::from_be_bytes(self.array(field)?))
    }

    pub(crate) fn u64(&mut self, field: &'static str) -> Result<u64, FrameError> {
        Ok(u64::from_be_bytes(self.array(field)?))
    }

    pub(crate) fn i32(&mut self, field: &'static str) -> Result<i32, FrameError> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    /// A non-negative `i32`: a broker node id or a leader epoch (Kafka's "none" is -1, which never travels).
    pub(crate) fn epoch(&mut self, field: &'static str) -> Result<i32, FrameError> {
        let start = self.pos;
        let v = i32::from_be_bytes(self.array(field)?);
        if v < 0 {
            self.pos = start;
            return Err(self.err(field, format!("negative value {v}")));
        }
        Ok(v)
    }

    /// A non-negative `i64` (offsets and segment bases are never negative).
    pub(crate) fn offset(&mut self, field: &'static str) -> Result<i64, FrameError> {
        let start = self.pos;
        let v = i64::from_be_bytes(self.array(field)?);
        if v < 0 {
            self.pos = start;
            return Err(self.err(field, format!("negative offset {v}")));
        }
        Ok(v)
    }

    pub(crate) fn string(&mut self, field: &'static str) -> Result<String, FrameError> {
        let len = usize::from(self.u16(field)?);
        let start = self.pos;
        let bytes = self.take(field, len)?;
        String::from_utf8(bytes.to_vec()).map_err(|e| FrameError::Field {
            frame: self.frame,
            field,
            offset: self.base + (start + e.utf8_error().valid_up_to()) as u64,
            reason: "not UTF-8".to_string(),
        })
    }

    pub(crate) fn opt_string(&mut self, field: &'static str) -> Result<Option<String>, FrameError> {
        match self.u8(field)? {
            0 => Ok(None),
            1 => self.string(field).map(Some),
            other => {
                self.pos -= 1;
                Err(self.err(field, format!("presence byte {other}, expected 0 or 1")))
            }
        }
    }

    pub(crate) fn bytes(&mut self, field: &'static str) -> Result<Bytes, FrameError> {
        let len = self.u32(field)? as usize;
        self.take(field, len)
    }

    pub(crate) fn sha256(&mut self, field: &'static str) -> Result<Sha256, FrameError> {
        self.array(field)
    }

    pub(crate) fn partition(&mut self) -> Result<PartitionRef, FrameError> {
        let topic = self.string("topic")?;
        if topic.is_empty() {
            self.pos -= 2;
            return Err(self.err("topic", "empty topic name"));
        }
        // Kafka's own rule: a name it refuses names no partition, and a receiver builds paths from it (a mirror
        // partition's directory, the applier's state files), so `..` or `/` must never get past the decoder.
        if let Err(reason) = segment_format::dir::validate_topic_name(&topic) {
            self.pos -= 2 + topic.len();
            return Err(self.err("topic", format!("not a valid Kafka topic name: {reason}")));
        }
        let partition = self.i32("partition")?;
        if partition < 0 {
            self.pos -= 4;
            return Err(self.err("partition", format!("negative partition {partition}")));
        }
        let topic_id = self.array("topic_id")?;
        Ok(PartitionRef {
            topic,
            partition,
            topic_id,
        })
    }

    pub(crate) fn position(&mut self) -> Result<Position, FrameError> {
        Ok(Position {
            partition: self.partition()?,
            segment_base: self.offset("segment_base")?,
            position: self.u64("position")?,
        })
    }

    pub(crate) fn role(&mut self) -> Result<Role, FrameError> {
        let code = self.u8("role")?;
        Role::from_code(code).ok_or_else(|| {
            self.pos -= 1;
            self.err("role", format!("unknown role {code}"))
        })
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Fails with the current position as the field's offset.
    pub(crate) fn fail(&self, field: &'static str, reason: impl Into<String>) -> FrameError {
        self.err(field, reason)
    }

    /// Rewinds `n` bytes, so an error about a value just read points at it.
    pub(crate) fn back(&mut self, n: usize) {
        self.pos = self.pos.saturating_sub(n);
    }

    pub(crate) fn finish(self) -> Result<(), FrameError> {
        let extra = self.buf.len() - self.pos;
        if extra == 0 {
            Ok(())
        } else {
            Err(FrameError::TrailingBytes {
                frame: self.frame,
                offset: self.base + self.pos as u64,
                extra: extra as u64,
            })
        }
    }
}

/// Writes the fields of one payload.
pub(crate) struct Writer<'a> {
    pub(crate) out: &'a mut BytesMut,
    pub(crate) frame: &'static str,
}

impl Writer<'_> {
    fn err(&self, field: &'static str, reason: impl Into<String>) -> FrameError {
        FrameError::Encode {
            frame: self.frame,
            field,
            reason: reason.into(),
        }
    }

    pub(crate) fn string(&mut self, field: &'static str, s: &str) -> Result<(), FrameError> {
        let len = u16::try_from(s.len()).map_err(|_| {
            self.err(
                field,
                format!("{} bytes, over the {} a string may hold", s.len(), u16::MAX),
            )
        })?;
        self.out.put_u16(len);
        self.out.put_slice(s.as_bytes());
        Ok(())
    }

    pub(crate) fn opt_string(&mut self, field: &'static str, s: Option<&str>) -> Result<(), FrameError> {
        match s {
            None => {
                self.out.put_u8(0);
                Ok(())
            }
            Some(s) => {
                self.out.put_u8(1);
                self.string(field, s)
            }
        }
    }

    pub(crate) fn bytes(&mut self, field: &'static str, b: &[u8]) -> Result<(), FrameError> {
        let len = u32::try_from(b.len()).map_err(|_| self.err(field, format!("{} bytes", b.len())))?;
        self.out.put_u32(len);
        self.out.put_slice(b);
        Ok(())
    }

    /// See [`Reader::epoch`].
    pub(crate) fn epoch(&mut self, field: &'static str, v: i32) -> Result<(), FrameError> {
        if v < 0 {
            return Err(self.err(field, format!("negative value {v}")));
        }
        self.out.put_i32(v);
        Ok(())
    }

    pub(crate) fn offset(&mut self, field: &'static str, v: i64) -> Result<(), FrameError> {
        if v < 0 {
            return Err(self.err(field, format!("negative offset {v}")));
        }
        self.out.put_i64(v);
        Ok(())
    }

    pub(crate) fn partition(&mut self, p: &PartitionRef) -> Result<(), FrameError> {
        if p.topic.is_empty() {
            return Err(self.err("topic", "empty topic name"));
        }
        if let Err(reason) = segment_format::dir::validate_topic_name(&p.topic) {
            return Err(self.err("topic", format!("not a valid Kafka topic name: {reason}")));
        }
        if p.partition < 0 {
            return Err(self.err("partition", format!("negative partition {}", p.partition)));
        }
        self.string("topic", &p.topic)?;
        self.out.put_i32(p.partition);
        self.out.put_slice(&p.topic_id);
        Ok(())
    }

    pub(crate) fn position(&mut self, p: &Position) -> Result<(), FrameError> {
        self.partition(&p.partition)?;
        self.offset("segment_base", p.segment_base)?;
        self.out.put_u64(p.position);
        Ok(())
    }
}

/// Smallest encoding of a [`Position`]: empty topic impossible, so 1-byte topic.
pub(crate) const MIN_POSITION_LEN: usize = 2 + 1 + 4 + 16 + 8 + 8;
