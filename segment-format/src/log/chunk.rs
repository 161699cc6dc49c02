//! The read buffers of a scan ([`LogFile::scan`](super::LogFile::scan)): a chunk of file bytes read with `pread`
//! into a page-aligned buffer, with room in front for the partial frame the chunk before cut, and the spare
//! buffers kept from one one-thread scan to the next. A read the file ends before is [`Shrunk`], never a fault:
//! the caller reports it as the file changing while read.

use std::fs::File;

use super::SEQUENTIAL_CHUNK_BYTES;

/// Alignment of the bytes a chunk reads into (a page).
pub(super) const READ_ALIGN: usize = 4096;

/// Read buffers of finished one-thread scans, kept for the next scan (of any file, on any thread). At most
/// [`MAX_SPARE_BUFFERS`] of at most [`MAX_SPARE_CAPACITY`] bytes each are kept, so the memory they hold stays
/// under 3 MiB whatever the process does; a buffer that grew for a large frame is freed, not kept.
pub(super) static SPARE_BUFFERS: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

/// Spare buffers kept: two per scan for four scans at once (`verify`'s workers, `apply`'s partitions).
pub(super) const MAX_SPARE_BUFFERS: usize = 8;

/// Largest buffer kept: a one-thread chunk of the first size, its carry room, and the alignment slack.
pub(super) const MAX_SPARE_CAPACITY: usize = 2 * SEQUENTIAL_CHUNK_BYTES + 2 * READ_ALIGN;

/// How a read ended short of what the file's size at open promised.
pub(super) struct Shrunk {
    /// Where the file ended.
    pub(super) at: u64,
}

/// Fill `buf` from `position`, all of it unless the file ends first.
#[cfg(unix)]
pub(super) fn read_full_at(file: &File, buf: &mut [u8], position: u64) -> std::io::Result<Result<(), Shrunk>> {
    use std::os::unix::fs::FileExt;
    let mut done = 0;
    while done < buf.len() {
        let Some(rest) = buf.get_mut(done..) else { break };
        match file.read_at(rest, position + done as u64) {
            Ok(0) => {
                return Ok(Err(Shrunk {
                    at: position + done as u64,
                }))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Ok(()))
}

#[cfg(not(unix))]
pub(super) fn read_full_at(file: &File, buf: &mut [u8], position: u64) -> std::io::Result<Result<(), Shrunk>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = file;
    f.seek(SeekFrom::Start(position))?;
    let mut done = 0;
    while done < buf.len() {
        match f.read(&mut buf[done..]) {
            Ok(0) => {
                return Ok(Err(Shrunk {
                    at: position + done as u64,
                }))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Ok(()))
}

/// A buffer of file bytes: `buf[start..]` holds the file from `position`.
#[derive(Default)]
pub(super) struct Chunk {
    pub(super) buf: Vec<u8>,
    pub(super) start: usize,
    pub(super) position: u64,
}

impl Drop for Chunk {
    fn drop(&mut self) {
        if self.buf.capacity() == 0 || self.buf.capacity() > MAX_SPARE_CAPACITY {
            return;
        }
        if let Ok(mut spare) = SPARE_BUFFERS.lock() {
            if spare.len() < MAX_SPARE_BUFFERS {
                spare.push(std::mem::take(&mut self.buf));
            }
        }
    }
}

impl Chunk {
    /// A chunk whose buffer is a spare one when there is one (see [`SPARE_BUFFERS`]).
    pub(super) fn pooled() -> Chunk {
        let buf = SPARE_BUFFERS
            .lock()
            .ok()
            .and_then(|mut spare| spare.pop())
            .unwrap_or_default();
        Chunk {
            buf,
            ..Chunk::default()
        }
    }

    pub(super) fn bytes(&self) -> &[u8] {
        self.buf.get(self.start..).unwrap_or_default()
    }

    pub(super) fn end(&self) -> u64 {
        self.position + self.bytes().len() as u64
    }

    /// Read `n` bytes from `position`, leaving `room` bytes in front for a
    /// partial frame of the chunk before.
    pub(super) fn read(
        &mut self,
        file: &File,
        position: u64,
        n: usize,
        room: usize,
    ) -> std::io::Result<Result<(), Shrunk>> {
        // Reused buffers are only resized: no zeroing of bytes read over anyway.
        // The bytes read start on a page boundary: the kernel's copy into a
        // misaligned buffer runs at a fraction of its speed (measured: 4-5x
        // slower on AMD EPYC with a 16-byte offset, as `malloc` returns).
        self.buf.resize(room + READ_ALIGN + n, 0);
        let misalign = (self.buf.as_ptr() as usize + room) % READ_ALIGN;
        let start = room + (READ_ALIGN - misalign) % READ_ALIGN;
        self.buf.truncate(start + n);
        self.start = start;
        self.position = position;
        let Some(target) = self.buf.get_mut(start..) else {
            return Ok(Ok(()));
        };
        read_full_at(file, target, position)
    }

    /// Put `carry` (the file bytes just before this chunk) in front of it.
    pub(super) fn prepend(&mut self, carry: &[u8]) {
        if carry.len() <= self.start {
            let from = self.start - carry.len();
            if let Some(room) = self.buf.get_mut(from..self.start) {
                room.copy_from_slice(carry);
                self.start = from;
                self.position -= carry.len() as u64;
                return;
            }
        }
        let mut joined = Vec::with_capacity(carry.len() + self.bytes().len());
        joined.extend_from_slice(carry);
        joined.extend_from_slice(self.bytes());
        self.position -= carry.len() as u64;
        self.buf = joined;
        self.start = 0;
    }

    /// Append `n` more bytes read from the file after this chunk's end.
    pub(super) fn extend(&mut self, file: &File, n: usize) -> std::io::Result<Result<(), Shrunk>> {
        let end = self.end();
        let old = self.buf.len();
        self.buf.resize(old + n, 0);
        let Some(target) = self.buf.get_mut(old..) else {
            return Ok(Ok(()));
        };
        read_full_at(file, target, end)
    }
}
