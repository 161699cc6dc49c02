//! The one error type of this crate.
//!
//! Callers branch on *why* a catalog call failed, so each reason a caller handles differently is its own variant with
//! typed fields: something is not there ([`Error::NotFound`]), the data belongs to another lineage
//! ([`Error::LineageBreak`]), the partition was promoted and is frozen ([`Error::Promoted`]), a segment does not fit
//! the partition's installed history ([`Error::Conflict`]), the database was written by a newer segmirror
//! ([`Error::SchemaTooNew`]). SQLite's own failures are wrapped once ([`Error::Sqlite`]) and classified once
//! ([`Error::is_transient`]) so the retry policy lives in one place in the caller.

use std::fmt;
use std::path::PathBuf;

use crate::key::{PartitionId, PartitionKey};

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a catalog call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The named link, partition or segment does not exist.
    #[error("{entity} not found in the catalog")]
    NotFound { entity: Entity },

    /// `create_link` for a name that is already taken; `state`: the existing link's state, so the operator who
    /// meant to create it learns at once whether it is the live link they expected, a paused one or a promoted one.
    #[error("{entity} already exists in the catalog{}", .state.map_or(String::new(), |s| format!(" (state {s})")))]
    AlreadyExists {
        entity: Entity,
        state: Option<crate::link_state::LinkState>,
    },

    /// The caller offered data of a different lineage (source topic ID) than the catalog records for the partition:
    /// the source topic was deleted and recreated. Never merged; the caller decides (pause, report, new lineage).
    #[error(
        "lineage break on {partition}: the catalog records source topic id {recorded}, \
         the offered data comes from source topic id {offered}"
    )]
    LineageBreak {
        partition: PartitionKey,
        recorded: String,
        offered: String,
    },

    /// A write to a promoted partition (or a state change of a promoted link). Promotion is terminal: a promoted
    /// partition belongs to a real broker now and is never written by the applier again.
    #[error("{entity} is promoted; the catalog refuses further writes to it")]
    Promoted { entity: Entity },

    /// A link state change (or configuration change) the lifecycle does not allow from `from`
    /// (`catalog::link_lifecycle`): nothing leaves `deleted`.
    #[error("link {link:?} is {from}: cannot {action}")]
    LinkTransition {
        link: String,
        from: crate::link_state::LinkState,
        action: &'static str,
    },

    /// `create_link` for the name of a deleted link whose tombstone still holds mirror partitions or truncation
    /// records: a new link of that name would take them over.
    #[error(
        "link {name:?} was deleted but still holds {partitions} mirror partition(s) and {truncations} truncation \
         record(s); a new link of that name would take them over: choose another name"
    )]
    NameOfDeletedLink {
        name: String,
        partitions: i64,
        truncations: i64,
    },

    /// The segment does not fit the partition's installed history (see [`ConflictReason`]).
    #[error("segment at base offset {base_offset} of {partition} conflicts with the installed segments: {reason}")]
    Conflict {
        partition: PartitionKey,
        base_offset: i64,
        reason: ConflictReason,
    },

    /// A compaction replacement that does not fit the installed history (see [`ReplacementRefusal`]).
    #[error("replacement of segments {replaced_bases:?} of {partition} refused: {reason}")]
    ReplacementRefused {
        partition: PartitionKey,
        replaced_bases: Vec<i64>,
        reason: ReplacementRefusal,
    },

    /// The caller described a segment that cannot be right: `0 <= base <= last < next` must hold, and the size must
    /// fit SQLite's signed 64-bit integers.
    #[error(
        "invalid segment description: base offset {base_offset}, last offset {last_offset}, \
         next offset {next_offset}, size {size} (need 0 <= base <= last < next and size <= 2^63 - 1)"
    )]
    InvalidSegment {
        base_offset: i64,
        last_offset: i64,
        next_offset: i64,
        size: u64,
    },

    /// An offset argument is negative.
    #[error("invalid {field}: {value} (offsets are never negative)")]
    InvalidOffset { field: &'static str, value: i64 },

    /// A document to record failed its checks (the message names the field).
    #[error("invalid {what}: {message}")]
    Invalid { what: &'static str, message: String },

    /// The database was migrated by a newer segmirror than this one. Nothing was written to it.
    #[error(
        "catalog {path} has schema version {found}, newer than version {supported} that this segmirror knows; \
         use a newer segmirror"
    )]
    SchemaTooNew { path: Location, found: u32, supported: u32 },

    /// SQLite refused write-ahead logging for a file database (e.g. a file system without shared memory support).
    /// The catalog needs WAL so that `segmirror status` can read while the applier writes.
    #[error("catalog {path}: SQLite could not enable WAL journaling (journal mode stayed {journal_mode:?})")]
    WalUnavailable { path: Location, journal_mode: String },

    /// The directory that should hold the catalog could not be created.
    #[error("cannot create catalog directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// Opening or preparing the database failed.
    #[error("cannot open catalog {path}: {source}")]
    Open {
        path: Location,
        #[source]
        source: rusqlite::Error,
    },

    /// The catalog records another mirror root than the one the command works on: its state describes other files,
    /// and using it would report installed segments as missing (or install into the wrong tree).
    #[error(
        "catalog {catalog} belongs to mirror root {recorded}, not to {offered}; use that mirror, or give \
         --catalog for this one (or omit --catalog for its default catalog)",
        recorded = recorded.display(),
        offered = offered.display()
    )]
    MirrorRootMismatch {
        catalog: Location,
        recorded: PathBuf,
        offered: PathBuf,
    },

    /// A mirror root that is not valid UTF-8 cannot be recorded (the catalog stores it as text).
    #[error("mirror root {} is not valid UTF-8; the catalog records its mirror root as text", path.display())]
    MirrorRootNotUtf8 { path: PathBuf },

    /// Any other SQLite failure (I/O, busy past the timeout, full disk, a constraint violation).
    #[error("catalog database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

impl Error {
    /// True when retrying the same call later may succeed: the database was locked by another process for longer
    /// than the busy timeout. Everything else is permanent for the call that got it.
    pub fn is_transient(&self) -> bool {
        let sqlite = match self {
            Error::Sqlite(e) | Error::Open { source: e, .. } => e,
            _ => return false,
        };
        matches!(
            sqlite.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        )
    }
}

/// Which catalog record an error is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entity {
    /// A link, by name.
    Link(String),
    /// A mirror partition, by its natural key.
    Partition(PartitionKey),
    /// A mirror partition, by its catalog id (when the key is not known because the row is missing).
    PartitionId(PartitionId),
    /// A segment of a partition, by base offset.
    Segment { partition: PartitionKey, base_offset: i64 },
}

impl fmt::Display for Entity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Entity::Link(name) => write!(f, "link {name:?}"),
            Entity::Partition(key) => write!(f, "partition {key}"),
            Entity::PartitionId(id) => write!(f, "partition id {id}"),
            Entity::Segment { partition, base_offset } => {
                write!(f, "segment at base offset {base_offset} of partition {partition}")
            }
        }
    }
}

/// Why a segment does not fit a partition's installed history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConflictReason {
    /// The segment starts below the installed end offset and is not a newer version of the last installed segment.
    /// Installs advance in offset order; installed segments never overlap.
    Overlap { installed_end_offset: i64 },
    /// A newer version of an installed segment must end at or after the installed version (segments only grow).
    Shrinks { installed_next_offset: i64 },
    /// The installed version is sealed (immutable) and the offered version differs from it.
    SealedChanged,
    /// The offered version covers the same offsets as the installed one but its bytes differ (size or SHA-256).
    Diverged,
    /// The segment starts above the installed end offset, leaving offsets `[installed_end_offset, base)` missing,
    /// and the partition's recorded log start offset does not reach its base (nothing legitimate leaves a hole in
    /// the middle of a log: retention deletes from the front only).
    Gap {
        installed_end_offset: i64,
        log_start_offset: i64,
    },
}

impl fmt::Display for ConflictReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConflictReason::Overlap { installed_end_offset } => write!(
                f,
                "it overlaps installed data (installed end offset {installed_end_offset}) \
                 and is not a newer version of the last installed segment"
            ),
            ConflictReason::Shrinks { installed_next_offset } => write!(
                f,
                "it ends before the installed version of the same segment (installed next offset \
                 {installed_next_offset})"
            ),
            ConflictReason::SealedChanged => f.write_str("the installed version is sealed and differs from it"),
            ConflictReason::Diverged => {
                f.write_str("it covers the same offsets as the installed version with other bytes")
            }
            ConflictReason::Gap {
                installed_end_offset,
                log_start_offset,
            } => write!(
                f,
                "it starts above the installed end offset {installed_end_offset}, leaving a hole the log start offset \
                 {log_start_offset} does not explain"
            ),
        }
    }
}

/// Why a compaction replacement was refused ([`Error::ReplacementRefused`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplacementRefusal {
    /// The replaced bases are empty or not strictly increasing.
    NotIncreasing,
    /// A replaced base is not an installed segment.
    NotInstalled { base_offset: i64 },
    /// The installed segments in the replaced range are not exactly the replaced bases (one was left out).
    NotContiguous { installed: Vec<i64> },
    /// A replaced segment is not sealed: a cleaner never rewrites a segment still growing.
    NotSealed { base_offset: i64 },
    /// The replacement's last offset lies outside the replaced range `[first base, range_end)`.
    LastOffsetOutside { last_offset: i64, range_end: i64 },
}

impl fmt::Display for ReplacementRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReplacementRefusal::NotIncreasing => f.write_str("the replaced bases are not a non-empty increasing list"),
            ReplacementRefusal::NotInstalled { base_offset } => {
                write!(f, "no installed segment at base offset {base_offset}")
            }
            ReplacementRefusal::NotContiguous { installed } => write!(
                f,
                "the installed segments in that range are {installed:?}: a replacement covers a contiguous run"
            ),
            ReplacementRefusal::NotSealed { base_offset } => {
                write!(f, "the segment at base offset {base_offset} is not sealed")
            }
            ReplacementRefusal::LastOffsetOutside { last_offset, range_end } => write!(
                f,
                "its last offset {last_offset} lies outside the replaced range (which ends at {range_end})"
            ),
        }
    }
}

/// Where a catalog lives, for error messages: a file, or an in-memory database in tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    File(PathBuf),
    InMemory,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::File(path) => write!(f, "{}", path.display()),
            Location::InMemory => f.write_str(":memory:"),
        }
    }
}

/// Text that names no value of a catalog enum (a state or an event kind), from [`std::str::FromStr`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {text:?}")]
pub struct UnknownValue {
    /// Which enum, e.g. `LinkState`.
    pub kind: &'static str,
    pub text: String,
}
