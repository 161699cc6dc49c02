//! The one error type of the shipper crate.
//!
//! Everything about the transport (a missing object, a mismatch, fencing, a bad
//! bucket document) is a [`segmirror_transport::Error`], wrapped whole in
//! [`Error::Transport`] so callers still ask it the transport's questions
//! ([`Error::is_transient`]). What is the shipper's own: settings, reading the
//! source log dirs, background tasks.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The transport failed or refused (see [`segmirror_transport::Error`]).
    #[error(transparent)]
    Transport(#[from] segmirror_transport::Error),

    /// A source file is malformed.
    #[error(transparent)]
    Format(#[from] segment_format::Error),

    /// A local file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A setting given to the shipper is unusable (a topic pattern that does not
    /// compile, an illegal link name or shipper id).
    #[error("{setting}: {reason}")]
    InvalidSetting { setting: &'static str, reason: String },

    /// The tail feed's resume position cannot be continued from: the segment
    /// is gone without retention or a merge to explain it, the position is not
    /// a batch boundary of it (or lies beyond its end) and no cleaner rewrote
    /// it, or the mirror's end names an epoch or offsets the source cannot
    /// place. In a session it refuses that partition for the session, not the
    /// session (`TailFeed::refused_resume`).
    #[error("tail resume of {partition} at segment {segment_base} byte {position}: {reason}")]
    ResumeInvalid {
        partition: String,
        segment_base: i64,
        position: u64,
        reason: String,
    },

    /// Bytes the tail feed already shipped are not what the source holds now
    /// (truncated, replaced or rewritten): nothing more of the segment ships.
    #[error("tail of {partition} segment {segment_base} diverged at byte {position}: {reason}")]
    Diverged {
        partition: String,
        segment_base: i64,
        position: u64,
        reason: String,
    },

    /// The source broker asked over the Kafka protocol (`--source-bootstrap`)
    /// is unreachable, or answered something unusable.
    #[error("source broker {broker}: {reason}")]
    SourceBroker { broker: String, reason: String },

    /// A background task panicked or was cancelled.
    #[error("{what}: background task failed: {message}")]
    Task { what: String, message: String },
}

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Worth retrying: a transient transport failure only.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Transport(e) if e.is_transient())
    }

    /// A source file vanished or changed while it was read (a segment the cleaner or retention deleted after the
    /// listing named it): nothing is wrong with the source, the next listing shows what it holds now.
    pub fn is_source_changed(&self) -> bool {
        match self {
            Error::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
            Error::Format(segment_format::Error::Io { source, .. }) => source.kind() == std::io::ErrorKind::NotFound,
            Error::Format(e) => e.is_changed_while_read(),
            _ => false,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
