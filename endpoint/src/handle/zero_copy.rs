//! Fetch responses sent straight from the segment files (`sendfile`), for plaintext clients.
//!
//! Why this shape: the `kafka-protocol` crate encodes a response from values, records included, into one buffer.
//! To keep its encoding (every version's field layout) and still never copy the records through this process, a
//! partition's records are given to the encoder as a placeholder: a slice of [`ZEROS`], a static zero region that
//! is never read, at an offset of its own. [`Spliced`] is the buffer the response is encoded into: it copies every
//! other byte, and when the encoder writes a placeholder it records the placeholder's file spans instead. The
//! connection then writes the copied pieces and has the kernel send the spans from the files.
//!
//! Memory: a response held for a slow client costs its headers and the open files of its spans, not its records,
//! so the fetch memory bound (`handle::fetch`) applies to buffered responses only (TLS, the bucket replica).

use std::collections::HashMap;
use std::ops::Range;

use bytes::buf::UninitSlice;
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::buf::ByteBufMut;

use crate::replica::FileSpan;

/// Most record bytes one response can send from files (32 MiB, in `.bss`: zero pages never touched, so never
/// resident). A response asking for more sends the rest buffered.
static ZEROS: [u8; 32 << 20] = [0; 32 << 20];

/// One piece of an encoded response.
#[derive(Debug)]
pub enum Piece {
    /// Bytes encoded here (headers, ends, everything but records sent from files).
    Bytes(Bytes),
    /// Records sent from a segment file.
    File(FileSpan),
}

impl Piece {
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn len(&self) -> u64 {
        match self {
            Piece::Bytes(b) => b.len() as u64,
            Piece::File(span) => span.len,
        }
    }
}

/// The placeholders of one response: where in [`ZEROS`] each partition's records stand, and their spans.
#[derive(Debug, Default)]
pub struct Placeholders {
    used: usize,
    spans: HashMap<usize, Vec<FileSpan>>,
}

impl Placeholders {
    /// Room left for records sent from files.
    pub fn room(&self) -> usize {
        ZEROS.len() - self.used
    }

    /// The placeholder standing for `spans` (`len` bytes in all), or `None` when the response has no room left.
    pub fn hold(&mut self, spans: Vec<FileSpan>, len: usize) -> Option<Bytes> {
        if len == 0 {
            return Some(Bytes::new());
        }
        let region = ZEROS.get(self.used..self.used.checked_add(len)?)?;
        self.spans.insert(self.used, spans);
        self.used += len;
        Some(Bytes::from_static(region))
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }
}

/// The buffer a response with placeholders is encoded into (see the module docs).
pub struct Spliced {
    pieces: Vec<Piece>,
    current: BytesMut,
    /// Bytes in `pieces`.
    before: usize,
    placeholders: Placeholders,
}

impl Spliced {
    pub fn new(placeholders: Placeholders) -> Self {
        Self {
            pieces: Vec::new(),
            current: BytesMut::new(),
            before: 0,
            placeholders,
        }
    }

    /// The pieces, in order. A placeholder the encoder never wrote belongs to a partition the answer left out (an
    /// incremental fetch session sends only what changed): its spans are dropped with it.
    pub fn finish(mut self) -> Vec<Piece> {
        if !self.current.is_empty() {
            self.pieces.push(Piece::Bytes(self.current.split().freeze()));
        }
        self.pieces
    }

    fn flush(&mut self) {
        if !self.current.is_empty() {
            let bytes = self.current.split().freeze();
            self.before += bytes.len();
            self.pieces.push(Piece::Bytes(bytes));
        }
    }
}

// SAFETY: every method delegates to the `BytesMut` being filled; `advance_mut` advances it by what its own
// `chunk_mut` handed out.
unsafe impl BufMut for Spliced {
    fn remaining_mut(&self) -> usize {
        self.current.remaining_mut()
    }

    unsafe fn advance_mut(&mut self, cnt: usize) {
        // SAFETY: the caller initialized `cnt` bytes of `current`'s `chunk_mut`.
        unsafe { self.current.advance_mut(cnt) }
    }

    fn chunk_mut(&mut self) -> &mut UninitSlice {
        self.current.chunk_mut()
    }

    fn put_slice(&mut self, src: &[u8]) {
        let zeros = ZEROS.as_ptr() as usize;
        let at = (src.as_ptr() as usize).wrapping_sub(zeros);
        if !src.is_empty() && at < ZEROS.len() {
            if let Some(spans) = self.placeholders.spans.remove(&at) {
                self.flush();
                self.before += src.len();
                self.pieces.extend(spans.into_iter().map(Piece::File));
                return;
            }
        }
        self.current.extend_from_slice(src);
    }
}

impl ByteBufMut for Spliced {
    fn offset(&self) -> usize {
        self.before + self.current.len()
    }

    fn seek(&mut self, offset: usize) {
        // Only forward, within the bytes encoded here: the encoder seeks to reserve a gap it fills later, and
        // message encoding (unlike record batches, never encoded here) reserves none.
        if let Some(len) = offset.checked_sub(self.before) {
            self.current.resize(len, 0);
        }
    }

    fn range(&mut self, r: Range<usize>) -> &mut [u8] {
        let before = self.before;
        let local = r.start.saturating_sub(before)..r.end.saturating_sub(before);
        match self.current.get_mut(local) {
            Some(slice) => slice,
            None => &mut [],
        }
    }
}
