//! The one error type of the applier crate.
//!
//! An [`Error`] means "this could not be done, and it says nothing about the data": the store or the catalog failed,
//! a local file could not be written, the mirror directory is in a state the applier did not leave it in. Data the
//! applier judged and turned down — a segment whose CRCs fail, a manifest that lies — is not an error but a
//! [`Refusal`](crate::report::Refusal) in the [`ApplyReport`](crate::report::ApplyReport): refusing bad data is the
//! applier doing its job. Callers branch on that split (exit code 1 vs 2 in the CLI), and on
//! [`Error::is_transient`] to decide whether a rerun may succeed as is.

use std::path::PathBuf;

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that stops the applier (or one partition of a run) without being a verdict on the data.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The object store failed (after the store's own retries), or a key could not be built.
    #[error(transparent)]
    Store(#[from] segmirror_transport::Error),

    /// The catalog failed.
    #[error(transparent)]
    Catalog(#[from] segmirror_catalog::Error),

    /// A local Kafka file the applier maintains (`leader-epoch-checkpoint`, `partition.metadata`) could not be read
    /// or written.
    #[error(transparent)]
    Format(#[from] segment_format::Error),

    /// A local file or directory could not be read, written, renamed or synced.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The mirror root is a Kafka broker log dir. The applier keeps a staging directory in its mirror root, which a
    /// broker would refuse to start on; promotion moves partitions into a broker's log dir instead.
    #[error(
        "mirror root {} is a Kafka log dir (it holds meta.properties); use a directory of its own and \
         `segmirror promote` to move partitions into a broker",
        path.display()
    )]
    MirrorIsLogDir { path: PathBuf },

    /// Another `apply` holds the mirror's lock (see `lock`).
    #[error(
        "another apply is running on this mirror ({holder}; lock file {}): wait for it to finish, or run with --wait",
        path.display()
    )]
    MirrorLocked { path: PathBuf, holder: String },

    /// A link was named that neither the catalog nor the store has (a typo); nothing was created for it.
    #[error("link '{link}' is neither in the catalog nor under prefix '{prefix}' of the store{}", if known.is_empty() { String::new() } else { format!(" (links there: {})", known.join(", ")) })]
    UnknownLink {
        link: String,
        prefix: String,
        known: Vec<String>,
    },

    /// The store's link identity object names another link id than the one this catalog's link follows: the
    /// source's link was deleted and created again (or another host's link of the same name ships there).
    #[error(
        "the store's link '{link}' belongs to link id {bucket_id} ({key}), but this catalog's link '{link}' follows \
         link id {recorded_id}: a link deleted and recreated is another link; give it another name, or a new mirror \
         and catalog"
    )]
    ForeignLinkBucket {
        link: String,
        key: String,
        bucket_id: String,
        recorded_id: String,
    },

    /// A follower's link was promoted or deleted while it ran: nothing is installed under it again.
    #[error("link '{link}' is {state}: nothing is installed under it again; stopping")]
    LinkClosed { link: String, state: String },

    /// No link was named and the store holds more than one under the prefix.
    #[error("the store holds {} links under prefix '{prefix}' ({}); choose one with --link", links.len(), links.join(", "))]
    AmbiguousLink { prefix: String, links: Vec<String> },

    /// A link name that cannot appear in a bucket key.
    #[error("link name {name:?}: {reason}")]
    BadLinkName { name: String, reason: String },

    /// The catalog lists a segment as installed but the mirror directory does not hold it as recorded: files were
    /// removed or changed behind segmirror's back, or `--mirror` names another directory than the one this catalog
    /// describes. The applier never guesses here; the partition is left alone.
    #[error(
        "{partition}: the catalog lists segment {base_offset} as installed, but {}: {reason} \
         (files changed behind segmirror's back, or the wrong --mirror/--catalog)",
        path.display()
    )]
    DiskBehindCatalog {
        partition: String,
        base_offset: i64,
        path: PathBuf,
        reason: String,
    },

    /// The partition directory belongs to another topic (its `partition.metadata` names another topic id).
    #[error(
        "{}: partition.metadata names topic id {found}, but this partition mirrors source topic id {expected}; \
         left untouched",
        path.display()
    )]
    ForeignPartitionDir {
        path: PathBuf,
        found: String,
        expected: String,
    },

    /// A promotion failed or was refused (see [`crate::promote::Error`]).
    #[error(transparent)]
    Promote(#[from] crate::promote::Error),

    /// The continuous appender refused a chunk or a seal (see [`crate::direct::TailError`]). Like promotion, the tail
    /// appender is a subsystem with an error of its own, wrapped here one way.
    #[error(transparent)]
    Tail(#[from] crate::direct::TailError),

    /// A background (blocking) task panicked or was cancelled.
    #[error("{what}: background task failed: {message}")]
    Task { what: String, message: String },

    /// A kill point of the install protocol was hit (crash tests only).
    #[cfg(feature = "failpoints")]
    #[error("failpoint {0:?} hit")]
    Injected(crate::failpoint::FailPoint),
}

#[cfg(feature = "failpoints")]
impl From<crate::failpoint::Injected> for Error {
    fn from(injected: crate::failpoint::Injected) -> Self {
        Error::Injected(injected.0)
    }
}

impl From<crate::lock::LockError> for Error {
    fn from(e: crate::lock::LockError) -> Self {
        match e {
            crate::lock::LockError::Locked { path, holder } => Error::MirrorLocked { path, holder },
            crate::lock::LockError::Io { path, source } => Error::Io { path, source },
        }
    }
}

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn task(what: impl Into<String>, e: tokio::task::JoinError) -> Self {
        Error::Task {
            what: what.into(),
            message: e.to_string(),
        }
    }

    /// True when running again later, unchanged, may succeed: the store or the catalog was unavailable for longer
    /// than their retries allow. Everything else needs a person (or a fixed bucket) first.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Store(e) => e.is_transient(),
            Error::Catalog(e) => e.is_transient(),
            Error::Promote(e) => e.is_transient(),
            _ => false,
        }
    }
}

impl From<crate::mirror::LayoutError> for Error {
    fn from(e: crate::mirror::LayoutError) -> Error {
        match e {
            crate::mirror::LayoutError::Io { path, source } => Error::Io { path, source },
            crate::mirror::LayoutError::IsLogDir { path } => Error::MirrorIsLogDir { path },
        }
    }
}
