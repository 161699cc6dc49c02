//! The one error type of the transport crate.
//!
//! Callers branch on a few questions, so each has a variant or a predicate: did
//! the object not exist ([`Error::NotFound`]), did a create-if-absent lose
//! ([`Error::AlreadyExists`]), did the bytes not match what a manifest promised
//! ([`Error::Mismatch`]), is this shipper fenced ([`Error::Fenced`]), and — the
//! one question the retry loop asks — is it worth trying again
//! ([`Error::is_transient`]). Transience is decided once, when the store
//! converts its client's error, never by matching messages at call sites.
//! Every variant names the object key or file it is about.
//!
//! Why in the contract: parsing a key, validating a manifest and reading the
//! bucket index fail with the same variants a store's transfer does, and
//! callers branch on one set of them. A store client's own error is carried
//! opaque ([`StoreFailure`]), so no client library is part of this type.
//!
//! A bucket problem is a bucket problem: a key that is not one the contract
//! builds is [`Error::BadKey`], a malformed manifest or lease is
//! [`Error::BadDocument`] with a typed [`DocumentProblem`] — never a Kafka
//! format defect of `segment-format`, whose errors are about log-dir files.

use std::path::PathBuf;

/// What was compared when a download or upload did not match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MismatchKind {
    Size,
    Sha256,
    Crc32c,
}

impl std::fmt::Display for MismatchKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MismatchKind::Size => "size",
            MismatchKind::Sha256 => "sha256",
            MismatchKind::Crc32c => "crc32c",
        })
    }
}

/// A store client's own error, the cause of [`Error::Store`] and [`Error::NotSupported`]: opaque, so that the
/// contract names no store client (the store classifies it before boxing it).
pub type StoreFailure = Box<dyn std::error::Error + Send + Sync + 'static>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A store URL or store option is unusable.
    #[error("store URL '{url}': {reason}")]
    BadUrl { url: String, reason: String },

    /// The object does not exist.
    #[error("{key}: no such object")]
    NotFound { key: String },

    /// A create-if-absent put found the object already there.
    #[error("{key}: object already exists")]
    AlreadyExists { key: String },

    /// The store cannot do what was asked (e.g. conditional puts disabled).
    #[error("{key}: {operation} is not supported by this store: {source}")]
    NotSupported {
        key: String,
        operation: &'static str,
        #[source]
        source: StoreFailure,
    },

    /// An object is larger than the caller allows (small documents are capped
    /// before they are read into memory).
    #[error("{key}: object of {size} bytes exceeds the limit of {limit} bytes")]
    TooLarge { key: String, size: u64, limit: u64 },

    /// Downloaded or uploaded bytes differ from what was expected.
    #[error("{key}: {what} mismatch: expected {expected}, found {found}")]
    Mismatch {
        key: String,
        what: MismatchKind,
        expected: String,
        found: String,
    },

    /// Any other failure of the object store. `transient` is decided once, by the store, from the failure's kind.
    #[error("{key}: {operation} failed{}: {source}", if *transient { " (transient)" } else { "" })]
    Store {
        key: String,
        operation: &'static str,
        transient: bool,
        #[source]
        source: StoreFailure,
    },

    /// A local-folder store holds something other than a regular file at `key` (a FIFO, socket, device or link):
    /// never opened (opening a FIFO blocks), never followed.
    #[error("{key}: {what}, not a regular file: refused (a store holds regular files only)")]
    NotRegularFile { key: String, what: String },

    /// A local file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A key is not one the bucket contract builds (`manifest::keys`): listed
    /// under the prefix but foreign, or a name that would not be safe as a key.
    #[error("{key}: {reason}")]
    BadKey { key: String, reason: String },

    /// A bucket document (manifest or lease) is malformed, of an unknown format, or
    /// inconsistent with itself or with the key it was read from.
    #[error("{key}: byte {position}: {problem}")]
    BadDocument {
        key: String,
        position: u64,
        problem: DocumentProblem,
    },

    /// A Kafka file (a segment downloaded for a deep audit) failed `segment-format`'s checks.
    #[error(transparent)]
    Format(#[from] segment_format::Error),

    /// Another shipper acquired a newer lease on the partition: this one must stop.
    #[error("{partition}: fenced: holding lease epoch {held_epoch}, but epoch {newer_epoch} exists")]
    Fenced {
        partition: String,
        held_epoch: u64,
        newer_epoch: u64,
    },

    /// The lease object this shipper holds was removed from the bucket.
    #[error("{partition}: lease epoch {epoch} is no longer in the bucket")]
    LeaseLost { partition: String, epoch: u64 },

    /// Acquiring a lease kept losing races to other shippers.
    #[error("{partition}: could not acquire a lease after {attempts} attempts (other shippers keep winning)")]
    LeaseContention { partition: String, attempts: u32 },

    /// A background task panicked or was cancelled.
    #[error("{what}: background task failed: {message}")]
    Task { what: String, message: String },
}

/// What is wrong with a bucket document ([`Error::BadDocument`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocumentProblem {
    /// Larger than the reader accepts; refused before parsing.
    TooLarge { size: u64, limit: u64 },
    /// Not JSON, another `format`, a missing or invalid field, or a value the contract forbids.
    Invalid { message: String },
    /// The leader epochs of a manifest do not increase.
    Epoch { message: String },
}

impl std::fmt::Display for DocumentProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DocumentProblem::TooLarge { size, limit } => write!(
                f,
                "document of {size} bytes exceeds the limit of {limit} bytes; rejected by its size, not read"
            ),
            DocumentProblem::Invalid { message } => write!(f, "manifest: {message}"),
            DocumentProblem::Epoch { message } => write!(f, "leader epoch: {message}"),
        }
    }
}

impl Error {
    /// A key the contract does not accept.
    pub fn bad_key(key: &str, reason: impl Into<String>) -> Self {
        Error::BadKey {
            key: key.to_string(),
            reason: reason.into(),
        }
    }

    /// What arrived at `key` is not what was expected.
    pub fn mismatch(
        key: &str,
        what: MismatchKind,
        expected: impl std::fmt::Display,
        found: impl std::fmt::Display,
    ) -> Self {
        Error::Mismatch {
            key: key.to_string(),
            what,
            expected: expected.to_string(),
            found: found.to_string(),
        }
    }

    /// A malformed document at `key`.
    pub fn bad_document(key: &str, position: u64, problem: DocumentProblem) -> Self {
        Error::BadDocument {
            key: key.to_string(),
            position,
            problem,
        }
    }

    /// This error as a report finding about `key` (the object it concerns when the error names none) at `offset`:
    /// a `segment-format` error keeps its own finding, a bad document its byte position.
    pub fn finding(&self, key: &str, offset: Option<i64>) -> segment_format::report::Finding {
        use segment_format::report::Finding;
        use segment_format::Defect;
        match self {
            Error::Format(e) => {
                let mut f = Finding::from_error(e);
                f.offset = f.offset.or(offset);
                f
            }
            Error::BadDocument {
                key: at,
                position,
                problem,
            } => Finding::error(
                at,
                Some(*position),
                offset,
                Defect::Other {
                    message: problem.to_string(),
                },
            ),
            other => Finding::error(
                key,
                None,
                offset,
                Defect::Other {
                    message: other.to_string(),
                },
            ),
        }
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Worth retrying: only store failures that the store judged transient.
    /// Everything else (missing objects, mismatches, local disk errors, fencing)
    /// will fail the same way again.
    pub fn is_transient(&self) -> bool {
        matches!(self, Error::Store { transient: true, .. })
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
