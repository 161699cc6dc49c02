//! Names in a Kafka log directory: partition directories, segment files and the
//! files that sit beside them.
//!
//! A replicator must know which files are live data (segments and their indexes,
//! snapshots, checkpoints), which are in-flight broker work that must never be
//! shipped (`.deleted`, `.cleaned`, `.swap`, `.tmp`), and which are foreign. The
//! rules follow Kafka: `LocalLog.parseTopicPartitionName` for directory names (the
//! partition number follows the **last** `-`; `-delete`/`-future`/`-stray` names
//! carry a `.<uniqueId>` before the suffix), `LogFileUtils` for file names (base
//! offset zero-padded to 20 digits) and `Topic.java` for topic legality.
//!
//! Listing never fails because of a strange name: unknown entries are returned as
//! [`Finding`]s, with severity `Error` when the broker itself would refuse to start
//! (a sub-directory whose name does not parse, a `*.log` whose prefix is not a
//! number) and `Warning` otherwise.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{Defect, Error, Result};
use crate::open::{entry_kind, not_regular_defect, EntryKind};
use crate::report::Finding;

/// Width of the zero-padded base offset in segment file names.
pub const OFFSET_DIGITS: usize = 20;
/// Longest legal topic name (`Topic.MAX_NAME_LENGTH`).
pub const MAX_TOPIC_LENGTH: usize = 249;
/// Per-partition epoch checkpoint.
pub const LEADER_EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
/// Per-partition topic id file.
pub const PARTITION_METADATA_FILE: &str = "partition.metadata";
/// Log-dir identity file.
pub const META_PROPERTIES_FILE: &str = "meta.properties";
/// Log-dir lock file.
pub const LOCK_FILE: &str = ".lock";
/// Clean-shutdown marker (`CleanShutdownFileHandler`).
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";
/// Root checkpoint: first offset per partition not known to be flushed.
pub const RECOVERY_POINT_CHECKPOINT_FILE: &str = "recovery-point-offset-checkpoint";
/// Root checkpoint: log start offsets.
pub const LOG_START_OFFSET_CHECKPOINT_FILE: &str = "log-start-offset-checkpoint";
/// Root checkpoint: high watermarks.
pub const REPLICATION_OFFSET_CHECKPOINT_FILE: &str = "replication-offset-checkpoint";
/// Root checkpoint: the log cleaner's first dirty offsets.
pub const CLEANER_OFFSET_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";
/// KRaft bootstrap metadata (metadata log dir only).
pub const BOOTSTRAP_CHECKPOINT_FILE: &str = "bootstrap.checkpoint";
/// The KRaft metadata log's partition directory.
pub const METADATA_LOG_DIR: &str = "__cluster_metadata-0";
/// Tiered-storage index cache, skipped by the broker when loading logs.
pub const REMOTE_LOG_INDEX_CACHE_DIR: &str = "remote-log-index-cache";
/// Suffix of files staged by an atomic rewrite.
pub const TMP_SUFFIX: &str = ".tmp";

/// The files of one segment (and the producer snapshot), by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SegmentFileKind {
    Log,
    Index,
    TimeIndex,
    TxnIndex,
    Snapshot,
}

impl SegmentFileKind {
    pub const ALL: [SegmentFileKind; 5] = [
        SegmentFileKind::Log,
        SegmentFileKind::Index,
        SegmentFileKind::TimeIndex,
        SegmentFileKind::TxnIndex,
        SegmentFileKind::Snapshot,
    ];

    /// Extension without the dot.
    pub fn extension(self) -> &'static str {
        match self {
            SegmentFileKind::Log => "log",
            SegmentFileKind::Index => "index",
            SegmentFileKind::TimeIndex => "timeindex",
            SegmentFileKind::TxnIndex => "txnindex",
            SegmentFileKind::Snapshot => "snapshot",
        }
    }

    pub fn from_extension(ext: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.extension() == ext)
    }
}

/// `<20-digit base offset>.<ext>`, as `LogFileUtils.filenamePrefixFromOffset` builds it.
/// Base offsets are never negative in Kafka; a negative value is formatted with a sign.
pub fn segment_file_name(base_offset: i64, kind: SegmentFileKind) -> String {
    format!("{base_offset:0width$}.{}", kind.extension(), width = OFFSET_DIGITS)
}

/// Suffixes of files the broker is in the middle of deleting or replacing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransientSuffix {
    /// Renamed for asynchronous deletion; deleted at the next load.
    Deleted,
    /// Cleaner or split output not yet swapped in; deleted at the next load.
    Cleaned,
    /// Being swapped in; completed (or discarded) at the next load.
    Swap,
}

impl TransientSuffix {
    pub fn suffix(self) -> &'static str {
        match self {
            TransientSuffix::Deleted => ".deleted",
            TransientSuffix::Cleaned => ".cleaned",
            TransientSuffix::Swap => ".swap",
        }
    }
}

/// What a file inside a partition directory is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionFile {
    /// A live segment file or producer snapshot.
    Segment {
        base_offset: i64,
        kind: SegmentFileKind,
    },
    /// A segment file in transit: never a live segment, never to be shipped.
    Transient {
        base_offset: i64,
        kind: SegmentFileKind,
        suffix: TransientSuffix,
    },
    LeaderEpochCheckpoint,
    PartitionMetadata,
    /// `<name>.tmp`, the staging file of an atomic rewrite of `target`.
    Temp {
        target: String,
    },
    /// Anything else. `fatal` when the broker would abort loading because of it
    /// (it ends in a segment extension but its prefix is not a number).
    Unknown {
        fatal: bool,
    },
}

/// Parse `<digits>.<ext>` with exactly [`OFFSET_DIGITS`] digits.
fn parse_offset_prefix(name: &str) -> Option<(i64, &str)> {
    let (prefix, rest) = name.split_once('.')?;
    if prefix.len() != OFFSET_DIGITS || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((prefix.parse().ok()?, rest))
}

/// Classify a file name found in a partition directory.
pub fn classify_partition_file(name: &str) -> PartitionFile {
    match name {
        LEADER_EPOCH_CHECKPOINT_FILE => return PartitionFile::LeaderEpochCheckpoint,
        PARTITION_METADATA_FILE => return PartitionFile::PartitionMetadata,
        _ => {}
    }
    if let Some(target) = name.strip_suffix(TMP_SUFFIX) {
        if !target.is_empty() {
            return PartitionFile::Temp {
                target: target.to_string(),
            };
        }
    }
    if let Some((base_offset, rest)) = parse_offset_prefix(name) {
        if let Some(kind) = SegmentFileKind::from_extension(rest) {
            return PartitionFile::Segment { base_offset, kind };
        }
        for suffix in [
            TransientSuffix::Deleted,
            TransientSuffix::Cleaned,
            TransientSuffix::Swap,
        ] {
            if let Some(kind) = rest
                .strip_suffix(suffix.suffix())
                .and_then(SegmentFileKind::from_extension)
            {
                return PartitionFile::Transient {
                    base_offset,
                    kind,
                    suffix,
                };
            }
        }
    }
    // `LogLoader` and `ProducerStateManager` call `Long.parseLong` on the prefix of
    // every file with a segment extension: a non-numeric prefix aborts the load.
    let fatal = SegmentFileKind::ALL.into_iter().any(|k| {
        name.strip_suffix(k.extension())
            .and_then(|s| s.strip_suffix('.'))
            .is_some_and(|prefix| {
                let prefix = prefix.split('.').next().unwrap_or(prefix);
                prefix.parse::<i64>().is_err()
            })
    });
    PartitionFile::Unknown { fatal }
}

/// Why a partition directory exists, from its name's suffix.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DirKind {
    /// `<topic>-<partition>`.
    Normal,
    /// `<topic>-<partition>.<uniqueId>-delete`: scheduled for deletion.
    Delete { unique_id: String },
    /// `<topic>-<partition>.<uniqueId>-future`: target of an intra-broker move.
    Future { unique_id: String },
    /// `<topic>-<partition>.<uniqueId>-stray`: a KRaft replica the broker set aside.
    Stray { unique_id: String },
}

impl DirKind {
    fn suffix(&self) -> Option<(&'static str, &str)> {
        match self {
            DirKind::Normal => None,
            DirKind::Delete { unique_id } => Some(("-delete", unique_id)),
            DirKind::Future { unique_id } => Some(("-future", unique_id)),
            DirKind::Stray { unique_id } => Some(("-stray", unique_id)),
        }
    }
}

/// A parsed partition directory name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionDirName {
    /// The topic as written in the name (for `-delete`/`-stray` names Kafka may
    /// have truncated it to keep the name within 255 characters).
    pub topic: String,
    pub partition: i32,
    pub kind: DirKind,
}

impl PartitionDirName {
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        PartitionDirName {
            topic: topic.into(),
            partition,
            kind: DirKind::Normal,
        }
    }

    /// Parse a directory name as `LocalLog.parseTopicPartitionName` does; the
    /// error is the reason, in words.
    pub fn parse(name: &str) -> std::result::Result<Self, String> {
        let not_a_partition =
            || format!("'{name}' is not in the form topic-partition or topic-partition.uniqueId-(delete|future|stray)");
        if !name.contains('-') {
            return Err(not_a_partition());
        }
        let mut kind = DirKind::Normal;
        let mut rest = name;
        for (suffix, make) in [
            (
                "-delete",
                (|u| DirKind::Delete { unique_id: u }) as fn(String) -> DirKind,
            ),
            ("-future", |u| DirKind::Future { unique_id: u }),
            ("-stray", |u| DirKind::Stray { unique_id: u }),
        ] {
            if let Some(stem) = name.strip_suffix(suffix) {
                // `^(\S+)-(\S+)\.(\S+)<suffix>`, then the part after the last '.' is dropped.
                let (tp, unique_id) = stem.rsplit_once('.').ok_or_else(not_a_partition)?;
                if !matches_suffixed_pattern(stem) || unique_id.is_empty() {
                    return Err(not_a_partition());
                }
                kind = make(unique_id.to_string());
                rest = tp;
                break;
            }
        }
        let (topic, partition) = rest.rsplit_once('-').ok_or_else(not_a_partition)?;
        if topic.is_empty() || partition.is_empty() {
            return Err(not_a_partition());
        }
        let partition = partition.parse::<i32>().map_err(|_| not_a_partition())?;
        Ok(PartitionDirName {
            topic: topic.to_string(),
            partition,
            kind,
        })
    }

    /// The directory name this parses from (`LocalLog.logDirName` and the suffixed forms).
    pub fn dir_name(&self) -> String {
        match self.kind.suffix() {
            None => format!("{}-{}", self.topic, self.partition),
            Some((suffix, unique_id)) => format!("{}-{}.{unique_id}{suffix}", self.topic, self.partition),
        }
    }

    /// Names starting with `__` (`__consumer_offsets`, `__transaction_state`,
    /// `__share_group_state`, `__cluster_metadata`, ...).
    pub fn is_internal(&self) -> bool {
        is_internal_topic(&self.topic)
    }
}

/// `^(\S+)-(\S+)\.(\S+)` over the whole of `stem` (the name without its suffix):
/// no whitespace, and some `-` (not first) followed, at least one character later,
/// by a `.` that is not last.
fn matches_suffixed_pattern(stem: &str) -> bool {
    if stem.chars().any(crate::java_text::is_java_whitespace) {
        return false;
    }
    let bytes = stem.as_bytes();
    let Some(dash) = bytes.iter().skip(1).position(|&b| b == b'-').map(|i| i + 1) else {
        return false;
    };
    let last_usable_dot = bytes
        .iter()
        .take(bytes.len().saturating_sub(1))
        .rposition(|&b| b == b'.');
    last_usable_dot.is_some_and(|dot| dot >= dash + 2)
}

/// True for Kafka's internal topics and anything else named `__*`.
pub fn is_internal_topic(topic: &str) -> bool {
    topic.starts_with("__")
}

/// `Topic.validate`: non-empty, not `.` or `..`, at most 249 characters of `[a-zA-Z0-9._-]`.
pub fn validate_topic_name(topic: &str) -> std::result::Result<(), String> {
    if topic.is_empty() {
        return Err("the empty string is not allowed".into());
    }
    if topic == "." || topic == ".." {
        return Err(format!("'{topic}' is not allowed"));
    }
    if topic.len() > MAX_TOPIC_LENGTH {
        return Err(format!(
            "the length of '{topic}' is longer than the max allowed length {MAX_TOPIC_LENGTH}"
        ));
    }
    if !topic
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
    {
        return Err(format!(
            "'{topic}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
        ));
    }
    Ok(())
}

/// Where a segment sits in its partition, which decides what its files may look like: the newest segment is the one
/// a running broker appends to (its indexes preallocated, its `.log` possibly ending inside a batch being written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentRole {
    /// Rolled: a later segment follows it, and its files are final.
    Sealed,
    /// The newest segment of its partition: no segment follows it.
    Newest,
}

impl SegmentRole {
    /// The role of a segment followed by the segment based at `next_base` (`None`: none follows, it is the newest).
    pub fn with_next(next_base: Option<i64>) -> Self {
        match next_base {
            Some(_) => SegmentRole::Sealed,
            None => SegmentRole::Newest,
        }
    }
}

/// The files of one segment that exist on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentFiles {
    pub base_offset: i64,
    pub log: PathBuf,
    pub index: Option<PathBuf>,
    pub time_index: Option<PathBuf>,
    pub txn_index: Option<PathBuf>,
}

/// A producer-state snapshot file; `offset` is the (exclusive) end offset it covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotFile {
    pub offset: i64,
    pub path: PathBuf,
}

/// A `.deleted` / `.cleaned` / `.swap` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransientFile {
    pub base_offset: i64,
    pub kind: SegmentFileKind,
    pub suffix: TransientSuffix,
    pub path: PathBuf,
}

/// The listing of one partition directory.
#[derive(Debug, Clone)]
pub struct PartitionDir {
    pub path: PathBuf,
    pub name: PartitionDirName,
    /// Segments sorted by base offset; only those with a `.log` file.
    pub segments: Vec<SegmentFiles>,
    /// Index files without a `.log` (the broker deletes them at load).
    pub orphan_indexes: Vec<PathBuf>,
    /// Sorted by offset.
    pub snapshots: Vec<SnapshotFile>,
    pub leader_epoch_checkpoint: Option<PathBuf>,
    pub partition_metadata: Option<PathBuf>,
    pub temp_files: Vec<PathBuf>,
    pub transient_files: Vec<TransientFile>,
    pub unknown_files: Vec<PathBuf>,
    /// Unknown, orphaned or illegally named entries.
    pub findings: Vec<Finding>,
}

fn other(message: String) -> Defect {
    Defect::Other { message }
}

/// Sorted `(name, path, is_dir)` of a directory's regular files and
/// sub-directories; names that are not UTF-8, and entries of any other type
/// (FIFOs, sockets, devices, symlinks: never opened, never followed, see
/// [`crate::open`]), are returned as findings. Such an entry with a name Kafka
/// uses is an error (the file it stands for cannot be read), any other a warning.
fn list(dir: &Path, findings: &mut Vec<Finding>) -> Result<Vec<(String, PathBuf, bool)>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let is_dir = match entry_kind(entry.file_type().map_err(|e| Error::io(&path, e))?) {
            EntryKind::File => false,
            EntryKind::Dir => true,
            EntryKind::Other(kind) => {
                let kafka_name = entry.file_name().to_str().is_some_and(|name| {
                    !matches!(classify_partition_file(name), PartitionFile::Unknown { .. })
                        || name == META_PROPERTIES_FILE
                        || RootCheckpoint::ALL.iter().any(|c| c.file_name() == name)
                });
                let defect = not_regular_defect(kind);
                findings.push(if kafka_name {
                    Finding::error(&path, None, None, defect)
                } else {
                    Finding::warning(&path, None, None, defect)
                });
                continue;
            }
        };
        match entry.file_name().into_string() {
            Ok(name) => out.push((name, path, is_dir)),
            Err(_) => findings.push(Finding::warning(
                &path,
                None,
                None,
                other("file name is not UTF-8; Kafka never creates such names".into()),
            )),
        }
    }
    out.sort();
    Ok(out)
}

impl PartitionDir {
    /// List a partition directory. Fails only if the directory cannot be read or
    /// its name is not a partition directory name.
    pub fn open(path: &Path) -> Result<PartitionDir> {
        let dir_name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let name = PartitionDirName::parse(dir_name).map_err(|reason| Error::BadName {
            path: path.to_path_buf(),
            reason,
        })?;
        let mut findings = Vec::new();
        if let Err(reason) = validate_topic_name(&name.topic) {
            findings.push(Finding::warning(
                path,
                None,
                None,
                other(format!("illegal topic name: {reason}")),
            ));
        }
        let mut pd = PartitionDir {
            path: path.to_path_buf(),
            name,
            segments: Vec::new(),
            orphan_indexes: Vec::new(),
            snapshots: Vec::new(),
            leader_epoch_checkpoint: None,
            partition_metadata: None,
            temp_files: Vec::new(),
            transient_files: Vec::new(),
            unknown_files: Vec::new(),
            findings: Vec::new(),
        };
        // base offset -> [log, index, timeindex, txnindex]
        let mut by_base: std::collections::BTreeMap<i64, [Option<PathBuf>; 4]> = Default::default();
        for (file_name, file_path, is_dir) in list(path, &mut findings)? {
            if is_dir {
                findings.push(Finding::warning(
                    &file_path,
                    None,
                    None,
                    other("unexpected sub-directory in a partition directory".into()),
                ));
                pd.unknown_files.push(file_path);
                continue;
            }
            match classify_partition_file(&file_name) {
                PartitionFile::Segment {
                    base_offset,
                    kind: SegmentFileKind::Snapshot,
                } => pd.snapshots.push(SnapshotFile {
                    offset: base_offset,
                    path: file_path,
                }),
                PartitionFile::Segment { base_offset, kind } => {
                    let slot = match kind {
                        SegmentFileKind::Log => 0,
                        SegmentFileKind::Index => 1,
                        SegmentFileKind::TimeIndex => 2,
                        _ => 3,
                    };
                    if let Some(s) = by_base.entry(base_offset).or_default().get_mut(slot) {
                        *s = Some(file_path);
                    }
                }
                PartitionFile::Transient {
                    base_offset,
                    kind,
                    suffix,
                } => pd.transient_files.push(TransientFile {
                    base_offset,
                    kind,
                    suffix,
                    path: file_path,
                }),
                PartitionFile::LeaderEpochCheckpoint => pd.leader_epoch_checkpoint = Some(file_path),
                PartitionFile::PartitionMetadata => pd.partition_metadata = Some(file_path),
                PartitionFile::Temp { .. } => pd.temp_files.push(file_path),
                PartitionFile::Unknown { fatal } => {
                    if fatal {
                        findings.push(Finding::error(
                            &file_path,
                            None,
                            None,
                            other(
                                "segment-like file whose name does not start with a number: the broker fails to \
                                 load the log"
                                    .into(),
                            ),
                        ));
                    } else {
                        findings.push(Finding::warning(&file_path, None, None, other("unknown file".into())));
                    }
                    pd.unknown_files.push(file_path);
                }
            }
        }
        for (base_offset, [log, index, time_index, txn_index]) in by_base {
            match log {
                Some(log) => pd.segments.push(SegmentFiles {
                    base_offset,
                    log,
                    index,
                    time_index,
                    txn_index,
                }),
                None => {
                    for orphan in [index, time_index, txn_index].into_iter().flatten() {
                        findings.push(Finding::warning(
                            &orphan,
                            None,
                            Some(base_offset),
                            other("index file without a .log file; the broker deletes it at load".into()),
                        ));
                        pd.orphan_indexes.push(orphan);
                    }
                }
            }
        }
        pd.snapshots.sort_by_key(|s| s.offset);
        pd.findings = findings;
        Ok(pd)
    }

    /// The newest segment (the active one on a running broker).
    pub fn newest_segment(&self) -> Option<&SegmentFiles> {
        self.segments.last()
    }
}

/// Which of the four root offset checkpoints a file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RootCheckpoint {
    RecoveryPoint,
    LogStartOffset,
    ReplicationOffset,
    CleanerOffset,
}

impl RootCheckpoint {
    pub const ALL: [RootCheckpoint; 4] = [
        RootCheckpoint::RecoveryPoint,
        RootCheckpoint::LogStartOffset,
        RootCheckpoint::ReplicationOffset,
        RootCheckpoint::CleanerOffset,
    ];

    pub fn file_name(self) -> &'static str {
        match self {
            RootCheckpoint::RecoveryPoint => RECOVERY_POINT_CHECKPOINT_FILE,
            RootCheckpoint::LogStartOffset => LOG_START_OFFSET_CHECKPOINT_FILE,
            RootCheckpoint::ReplicationOffset => REPLICATION_OFFSET_CHECKPOINT_FILE,
            RootCheckpoint::CleanerOffset => CLEANER_OFFSET_CHECKPOINT_FILE,
        }
    }
}

/// A partition directory found in a log dir (not yet opened).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionDirEntry {
    pub path: PathBuf,
    pub name: PartitionDirName,
}

/// An entry that the tool owning a directory keeps beside its partitions (a replica's lock file, its state and
/// staging directories). A broker would refuse to start on such a directory name, which is why a listing reports
/// it as an error in a log dir; in the tool's own directory (one without `meta.properties`, which a broker never
/// loads) it is what it claims to be, and a listing given it ([`LogDir::open_owned_by`]) sets it aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OwnEntry {
    pub name: &'static str,
    pub kind: OwnKind,
}

/// What an [`OwnEntry`] must be: an entry of that name but of the other kind is not the tool's and is reported as
/// any unknown entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OwnKind {
    Dir,
    File,
}

/// The listing of one log directory (an entry of `log.dirs`).
#[derive(Debug, Clone)]
pub struct LogDir {
    pub path: PathBuf,
    /// Sorted by topic, partition, then directory name.
    pub partitions: Vec<PartitionDirEntry>,
    pub meta_properties: Option<PathBuf>,
    pub checkpoints: Vec<(RootCheckpoint, PathBuf)>,
    pub lock_file: Option<PathBuf>,
    pub clean_shutdown_file: Option<PathBuf>,
    /// `__cluster_metadata-0` (KRaft metadata log; not loaded as a partition).
    pub metadata_log: Option<PathBuf>,
    pub bootstrap_checkpoint: Option<PathBuf>,
    pub remote_log_index_cache: Option<PathBuf>,
    pub temp_files: Vec<PathBuf>,
    pub unknown: Vec<PathBuf>,
    /// Entries of the tool owning a directory without `meta.properties` ([`LogDir::open_owned_by`]).
    pub own: Vec<PathBuf>,
    pub findings: Vec<Finding>,
}

impl LogDir {
    /// List a log directory. Sub-directories whose names the broker cannot parse
    /// are reported as `Error` findings: `LogManager.loadLogs` aborts on them.
    pub fn open(path: &Path) -> Result<LogDir> {
        LogDir::open_owned_by(path, &[])
    }

    /// [`LogDir::open`] of a directory that a tool keeps partitions in (a replica's root): the entries of `own`,
    /// when of their kind, go to [`LogDir::own`] without a finding. Only where no `meta.properties` is: in a
    /// broker's log dir such an entry still stops the broker, and is reported as in [`LogDir::open`].
    pub fn open_owned_by(path: &Path, own: &[OwnEntry]) -> Result<LogDir> {
        let mut findings = Vec::new();
        let mut ld = LogDir {
            path: path.to_path_buf(),
            partitions: Vec::new(),
            meta_properties: None,
            checkpoints: Vec::new(),
            lock_file: None,
            clean_shutdown_file: None,
            metadata_log: None,
            bootstrap_checkpoint: None,
            remote_log_index_cache: None,
            temp_files: Vec::new(),
            unknown: Vec::new(),
            own: Vec::new(),
            findings: Vec::new(),
        };
        let entries = list(path, &mut findings)?;
        let broker_dir = entries
            .iter()
            .any(|(name, _, is_dir)| !is_dir && name == META_PROPERTIES_FILE);
        for (name, entry_path, is_dir) in entries {
            let kind = if is_dir { OwnKind::Dir } else { OwnKind::File };
            if !broker_dir && own.iter().any(|e| e.name == name && e.kind == kind) {
                ld.own.push(entry_path);
                continue;
            }
            if is_dir {
                match name.as_str() {
                    METADATA_LOG_DIR => ld.metadata_log = Some(entry_path),
                    REMOTE_LOG_INDEX_CACHE_DIR => ld.remote_log_index_cache = Some(entry_path),
                    _ => match PartitionDirName::parse(&name) {
                        Ok(pname) => {
                            if let Err(reason) = validate_topic_name(&pname.topic) {
                                // Capped `-delete`/`-stray` names keep a legal prefix, so
                                // this only fires for names Kafka never creates.
                                findings.push(Finding::warning(
                                    &entry_path,
                                    None,
                                    None,
                                    other(format!("illegal topic name: {reason}")),
                                ));
                            }
                            ld.partitions.push(PartitionDirEntry {
                                path: entry_path,
                                name: pname,
                            });
                        }
                        Err(reason) => {
                            findings.push(Finding::error(
                                &entry_path,
                                None,
                                None,
                                other(format!(
                                    "{reason}: the broker fails to start with this directory present"
                                )),
                            ));
                            ld.unknown.push(entry_path);
                        }
                    },
                }
                continue;
            }
            let root_checkpoint = RootCheckpoint::ALL.into_iter().find(|c| c.file_name() == name);
            match name.as_str() {
                META_PROPERTIES_FILE => ld.meta_properties = Some(entry_path),
                LOCK_FILE => ld.lock_file = Some(entry_path),
                CLEAN_SHUTDOWN_FILE => ld.clean_shutdown_file = Some(entry_path),
                BOOTSTRAP_CHECKPOINT_FILE => ld.bootstrap_checkpoint = Some(entry_path),
                _ if root_checkpoint.is_some() => {
                    if let Some(kind) = root_checkpoint {
                        ld.checkpoints.push((kind, entry_path));
                    }
                }
                _ if name.ends_with(TMP_SUFFIX) => ld.temp_files.push(entry_path),
                _ => {
                    findings.push(Finding::warning(&entry_path, None, None, other("unknown file".into())));
                    ld.unknown.push(entry_path);
                }
            }
        }
        ld.partitions.sort_by(|a, b| {
            (&a.name.topic, a.name.partition, &a.path).cmp(&(&b.name.topic, b.name.partition, &b.path))
        });
        ld.findings = findings;
        Ok(ld)
    }

    /// The root checkpoint file of the given kind, if present.
    pub fn checkpoint(&self, kind: RootCheckpoint) -> Option<&Path> {
        self.checkpoints
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|(_, p)| p.as_path())
    }
}

#[cfg(test)]
#[path = "dir_tests.rs"]
mod tests;
