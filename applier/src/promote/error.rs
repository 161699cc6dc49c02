//! The error type of promotion.
//!
//! Why its own type: promotion is a command of its own with its own failure modes (the refusals that keep it from
//! starting, a journal it cannot read) and its own callers; the crate's [`crate::Error`] wraps this one, never the
//! other way round, so promotion's modules never import the apply side's error and the two cannot form a cycle.
//!
//! A [`Error::Refused`] means nothing was changed: every reason found is listed. Anything else happened while a
//! promotion may be under way; a rerun finishes it from its journal.

use std::path::PathBuf;

use super::refusal::{Refusal, Refusals};

/// Result alias for promotion.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that stops a promotion.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `segmirror promote` will not start (or finish): the target broker, its log dir or the mirror is not in a
    /// state a promotion may proceed from. Every reason found is listed; nothing was changed for them.
    #[error("promotion refused: {}", Refusals(refusals))]
    Refused { refusals: Vec<Refusal> },

    /// The catalog failed.
    #[error(transparent)]
    Catalog(#[from] segmirror_catalog::Error),

    /// A Kafka file of the mirror or the target (a segment, a checkpoint, `partition.metadata`, the metadata log,
    /// `server.properties`) could not be read or written.
    #[error(transparent)]
    Format(#[from] segment_format::Error),

    /// A local file or directory could not be read, written, renamed or synced (the journal included: a journal
    /// that is not one is reported as invalid data at its path).
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A kill point of a handover was hit (crash tests only).
    #[cfg(feature = "failpoints")]
    #[error("failpoint {0:?} hit")]
    Injected(crate::failpoint::FailPoint),
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// True when running again later, unchanged, may succeed (the catalog was busy for longer than its retries).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Catalog(e) => e.is_transient(),
            _ => false,
        }
    }
}
