//! The one error type of this crate.
//!
//! Callers branch on three things: the bytes are **corrupt** (a defect a broker
//! would choke on or silently mis-serve), the bytes are **incomplete** (a normal
//! state at the tail of an active segment, like a partial frame on a socket), or
//! the file could not be read at all (**I/O**). Every variant carries the file,
//! the byte position and, where known, the Kafka offset as typed fields so that a
//! report can name them without parsing strings.

use std::fmt;
use std::path::{Path, PathBuf};

/// What is wrong with a piece of Kafka data. One variant per defect class so that
/// `segmirror verify --json` can report a stable `kind`, and tests can assert on it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Defect {
    /// A length or size field is outside what the format allows.
    BadLength { field: &'static str, value: i64 },
    /// Magic byte not 0, 1 or 2.
    BadMagic { magic: i8 },
    /// Stored CRC differs from the CRC computed over the bytes Kafka covers.
    CrcMismatch { stored: u32, computed: u32 },
    /// Compression codec bits name no known codec.
    UnknownCodec { codec: u8 },
    /// Decompression failed.
    Decompression { codec: &'static str, message: String },
    /// A record inside a batch is malformed (bad varint, length past the end, ...).
    MalformedRecord { message: String },
    /// Record count or offset deltas disagree with the batch header.
    RecordCountMismatch { header: i64, found: i64 },
    /// Batch offsets do not increase, or lie outside the segment's range.
    OffsetOutOfOrder { previous: i64, found: i64 },
    /// Batch offset below the segment base offset or at/after the next segment's base.
    OffsetOutsideSegment {
        base_offset: i64,
        next_base_offset: Option<i64>,
        found: i64,
    },
    /// lastOffset - baseOffset of the segment does not fit in an i32.
    OffsetOverflow { base_offset: i64, found: i64 },
    /// Bytes after the last complete batch (anywhere but the newest segment's tail).
    TrailingBytes { bytes: u64 },
    /// An index file problem: size not a multiple of the entry size, entries not
    /// increasing, positions not on batch boundaries, zero tail in a sealed segment, ...
    Index { index: IndexKind, message: String },
    /// A checkpoint/metadata text file is malformed.
    Checkpoint { message: String },
    /// Leader epochs move backwards or disagree with the checkpoint.
    Epoch { message: String },
    /// Producer state snapshot is malformed.
    Snapshot { message: String },
    /// A control batch is malformed.
    Control { message: String },
    /// The file is larger than Kafka ever writes it (`what` names the file kind,
    /// `limit` the bound): rejected by its size, before it is read.
    TooLarge { what: &'static str, size: u64, limit: u64 },
    /// An entry that is not a regular file (`file_type` says what it is: a FIFO,
    /// a socket, a device, a symlink): never opened, never followed.
    NotRegularFile { file_type: &'static str },
    /// The file changed while it was read (a running broker truncated or
    /// replaced it): what was read describes no state of the file.
    ChangedWhileRead { message: String },
    /// Anything else, described in words.
    Other { message: String },
}

/// Which index a [`Defect::Index`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IndexKind {
    Offset,
    Time,
    Transaction,
}

impl fmt::Display for IndexKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IndexKind::Offset => "offset index",
            IndexKind::Time => "time index",
            IndexKind::Transaction => "transaction index",
        })
    }
}

impl fmt::Display for Defect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Defect::BadLength { field, value } => write!(f, "invalid {field} {value}"),
            Defect::BadMagic { magic } => write!(f, "unknown magic byte {magic}"),
            Defect::CrcMismatch { stored, computed } => {
                write!(f, "CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")
            }
            Defect::UnknownCodec { codec } => write!(f, "unknown compression codec id {codec}"),
            Defect::Decompression { codec, message } => {
                write!(f, "{codec} decompression failed: {message}")
            }
            Defect::MalformedRecord { message } => write!(f, "malformed record: {message}"),
            Defect::RecordCountMismatch { header, found } => {
                write!(f, "record count mismatch: header says {header}, found {found}")
            }
            Defect::OffsetOutOfOrder { previous, found } => {
                write!(f, "offsets not increasing: offset {found} follows {previous}")
            }
            Defect::OffsetOutsideSegment {
                base_offset,
                next_base_offset,
                found,
            } => match next_base_offset {
                Some(next) => write!(f, "offset {found} outside segment range [{base_offset}, {next})"),
                None => write!(f, "offset {found} below segment base offset {base_offset}"),
            },
            Defect::OffsetOverflow { base_offset, found } => write!(
                f,
                "offset {found} cannot be expressed relative to segment base offset {base_offset}"
            ),
            Defect::TrailingBytes { bytes } => {
                write!(f, "{bytes} bytes after the last complete batch")
            }
            Defect::Index { index, message } => write!(f, "{index}: {message}"),
            Defect::Checkpoint { message } => write!(f, "checkpoint: {message}"),
            Defect::Epoch { message } => write!(f, "leader epoch: {message}"),
            Defect::Snapshot { message } => write!(f, "producer snapshot: {message}"),
            Defect::Control { message } => write!(f, "control batch: {message}"),
            Defect::TooLarge { what, size, limit } => write!(
                f,
                "{what} of {size} bytes exceeds the limit of {limit} bytes; rejected by its size, not read"
            ),
            Defect::ChangedWhileRead { message } => write!(f, "changed while read: {message}"),
            Defect::NotRegularFile { file_type } => write!(
                f,
                "{file_type}, not a regular file: segmirror reads only regular files and follows no symlink; not read"
            ),
            Defect::Other { message } => f.write_str(message),
        }
    }
}

/// The error type of `segment-format`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The data is corrupt at `position` of `path`.
    #[error("{}: byte {position}{}: {defect}", path.display(), OffsetSuffix(*offset))]
    Corrupt {
        path: PathBuf,
        position: u64,
        offset: Option<i64>,
        defect: Defect,
    },
    /// The data ends before a frame does: `needed` bytes from `position`, only
    /// `available` present. Normal at the tail of an active segment.
    #[error("{}: byte {position}{}: incomplete: need {needed} bytes, {available} available", path.display(), OffsetSuffix(*offset))]
    Incomplete {
        path: PathBuf,
        position: u64,
        offset: Option<i64>,
        needed: u64,
        available: u64,
    },
    /// A name (file, directory, topic) is not in the form Kafka uses.
    #[error("{}: {reason}", path.display())]
    BadName { path: PathBuf, reason: String },
    /// An input file (JSON, properties) that does not hold what it must.
    #[error("{}: {reason}", path.display())]
    BadInput { path: PathBuf, reason: String },
    /// Reading or writing `path` failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

struct OffsetSuffix(Option<i64>);

impl fmt::Display for OffsetSuffix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(o) => write!(f, " (offset {o})"),
            None => Ok(()),
        }
    }
}

impl Error {
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.as_ref().to_path_buf(),
            source,
        }
    }

    pub fn corrupt(path: impl AsRef<Path>, position: u64, offset: Option<i64>, defect: Defect) -> Self {
        Error::Corrupt {
            path: path.as_ref().to_path_buf(),
            position,
            offset,
            defect,
        }
    }

    /// True for [`Error::Incomplete`]: more bytes may still arrive.
    pub fn is_incomplete(&self) -> bool {
        matches!(self, Error::Incomplete { .. })
    }

    /// True for [`Error::Corrupt`]: the bytes are wrong and will stay wrong.
    /// The file changed while it was read ([`Defect::ChangedWhileRead`]): a
    /// reader of a live log dir reads it again rather than calling it corrupt.
    pub fn is_changed_while_read(&self) -> bool {
        matches!(
            self,
            Error::Corrupt {
                defect: Defect::ChangedWhileRead { .. },
                ..
            }
        )
    }

    /// Rejected by its size ([`Defect::TooLarge`]).
    pub fn is_too_large(&self) -> bool {
        matches!(
            self,
            Error::Corrupt {
                defect: Defect::TooLarge { .. },
                ..
            }
        )
    }

    pub fn is_corrupt(&self) -> bool {
        matches!(self, Error::Corrupt { .. })
    }

    /// The file this error is about.
    pub fn path(&self) -> &Path {
        match self {
            Error::Corrupt { path, .. }
            | Error::Incomplete { path, .. }
            | Error::BadName { path, .. }
            | Error::BadInput { path, .. }
            | Error::Io { path, .. } => path,
        }
    }
}

/// A defect found by a parser that works on a byte slice and does not know the
/// file it came from: the caller attaches the path with [`ParseError::at`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    Corrupt {
        position: u64,
        offset: Option<i64>,
        defect: Defect,
    },
    Incomplete {
        position: u64,
        offset: Option<i64>,
        needed: u64,
        available: u64,
    },
}

impl ParseError {
    /// Attach the file path.
    pub fn at(self, path: impl AsRef<Path>) -> Error {
        let path = path.as_ref().to_path_buf();
        match self {
            ParseError::Corrupt {
                position,
                offset,
                defect,
            } => Error::Corrupt {
                path,
                position,
                offset,
                defect,
            },
            ParseError::Incomplete {
                position,
                offset,
                needed,
                available,
            } => Error::Incomplete {
                path,
                position,
                offset,
                needed,
                available,
            },
        }
    }

    /// Shift the position by `base` (a parser that ran on a sub-slice).
    pub fn shifted(self, base: u64) -> Self {
        match self {
            ParseError::Corrupt {
                position,
                offset,
                defect,
            } => ParseError::Corrupt {
                position: position + base,
                offset,
                defect,
            },
            ParseError::Incomplete {
                position,
                offset,
                needed,
                available,
            } => ParseError::Incomplete {
                position: position + base,
                offset,
                needed,
                available,
            },
        }
    }

    pub fn is_incomplete(&self) -> bool {
        matches!(self, ParseError::Incomplete { .. })
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
