//! The mirror appender: the applier's side of a direct session ([`ChunkApplier`]), appending shipped chunks to the
//! mirror's active segments as they arrive instead of installing whole segment versions.
//!
//! Why a separate path from [`crate::install`]: a tailed segment grows by chunks, so there is no whole-file digest
//! to check before the bytes land. Each chunk is therefore checked on its own *before* anything is written (every
//! batch framed, its CRC-32C matching, offsets increasing from the previous batch, the chunk ending on a
//! batch boundary), and the whole-file SHA-256 is checked at the seal.
//!
//! The chunk as a whole needs no check of its own here: the frame that carried it is CRC-32C-checked by the frame
//! decoder before the session sees it (`docs/direct-protocol.md`, frame envelope); what the appender checks is
//! what the frame CRC cannot vouch for, the source's batches themselves.
//!
//! # Durability order
//! write the bytes → fsync the `.log` (and the partition directory when the file is new) → record the new end in
//! the partition's state file (written atomically: temp file, fsync, rename, fsync dir). The record therefore never
//! claims more than is durable. After a crash the file may be *longer* than the record (bytes written, never
//! acknowledged): [`TailAppender::durable_positions`] truncates them away. A file *shorter* than the record means
//! acknowledged bytes were lost: an error, never papered over. Between the `.log` fsync and the record, the active
//! segment's derived companions are written (`.txnindex` entries durably, offset and time index entries without an
//! fsync; `companions` says why and how a start repairs them), so `verify --strict` is sound on a stopped mirror.
//!
//! A new segment is first *claimed* in the state file at 0 bytes, then created: a crash in between leaves a file the
//! record owns (truncated back to 0 at restart). A `.log` the record does not claim (left by another lineage, or
//! installed from the bucket for another link) is never truncated or appended to: the chunk is refused. A
//! partition `seed`/`apply` installed for this applier's link gets its record derived from the catalog at the
//! start of a session, once the files are checked against it (`handover`), and is continued from there; any other
//! partition starts in an empty directory.
//!
//! Offsets must increase within a segment (each batch's base offset at least the previous batch's last offset + 1),
//! the rule a Kafka follower applies to what it fetches; they need not continue exactly: a segment the source's
//! cleaner rewrote before the feed reached it (the feed lagged behind a kill or a cut) is shipped from byte 0 as it
//! now is, with the holes the cleaner left (as is a replica's log fetched from a compacted leader). Byte positions
//! continue exactly and every batch's CRC is checked, so nothing is skipped unseen. Across a seal the next
//! segment's base may jump ahead (retention, or the cleaner's hole at the end of the sealed segment: `catalog`)
//! but never back into the sealed segment's offsets.
//!
//! # Where the position is recorded
//! The active segment's durable position: in `<mirror>/.tail/<topic>-<partition>.json`, not in the catalog: the
//! catalog records whole installed versions (size, digests) and has no notion of a growing segment, and a commit
//! per chunk would put a second fsync on the latency path; a small per-partition file written atomically is the
//! simplest thing that is correct. The state lives outside the partition directory so a Kafka broker handed the
//! directory at promotion never sees it. With a catalog ([`TailAppender::open_with_catalog`], what `tail-apply`
//! runs), the partition and every sealed segment are recorded there too, and paused or promoted partitions are
//! refused: see `catalog` (this module's child) for what is recorded when, and `active` for how `promote` reads
//! the state file.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::durable::{drop_cached, fsync_dir, write_atomically, write_behind};
use segment_format::index::{OffsetIndexBuilder, TimeIndexBuilder, DEFAULT_INDEX_INTERVAL_BYTES};
use segment_format::log::{scan_frames_known, LogFile};
use segment_format::partition_metadata::Uuid;
use segmirror_transport::direct::error::{DirectError, Result as DirectResult};
use segmirror_transport::direct::payload::{
    Chunk, Claim, Companion, CompanionKind, LayoutSegment, LogEnd, LogStart, PartitionRef, Position, Roll,
    SegmentReplace, SegmentSeal, SourceProgress, TopicId, Truncate,
};
use segmirror_transport::direct::session::{ChunkApplier, ClaimDecision, DurablePosition};
use segmirror_transport::store::{digest_file, digest_of};
use serde::{Deserialize, Serialize};

use crate::chunk_rule::{BatchDefect, ChunkDefect, ChunkRule, Floor, LegacyFrames};
use crate::mirror;

mod active;
mod catalog;
#[cfg(test)]
mod catalog_follow_tests;
#[cfg(test)]
mod catalog_tests;
mod claims;
#[cfg(test)]
mod claims_tests;
mod companions;
#[cfg(test)]
mod companions_tests;
mod handover;
#[cfg(test)]
mod handover_tests;
#[cfg(test)]
mod peer_fault_tests;
mod progress;
mod replace;
mod retention;
#[cfg(test)]
mod session_tests;
#[cfg(test)]
mod tests;
mod truncate;
#[cfg(test)]
mod truncate_tests;

pub use active::{recorded_active_segment, ActiveSegment};
pub use catalog::{TailCatalog, TAIL_MANIFEST_KEY_PREFIX, TAIL_STORE_URL};
pub use claims::{claim_path, recorded_claim, ClaimRecord, ROLL_INDEX_INTERVAL_BYTES};
pub use progress::{progress_path, recorded_progress, RecordedProgress, RecordedShipped, MAX_PROGRESS_POINTS};
pub use replace::ReplaceSeal;
pub use retention::{tailed_log_start, DEFAULT_RETAIN_DELETED_FOR};
pub use truncate::{archive_path, ArchivedRange, RemovedSegment};

/// Why a partition stopped (a [`DirectError::PartitionStopped`]), which says when it may be applied again.
#[derive(Debug, Clone, Copy)]
enum StopCause {
    /// Another source topic id: once an operator accepts it (`segmirror link reset-partition`).
    Lineage,
    /// Paused or promoted in the catalog: once resumed.
    Paused,
    /// Its directory holds files this appender did not write: not in this process.
    Foreign,
    /// Its files could not be written or read, at that instant: tried again [`LOCAL_RETRY`] later.
    Local(std::time::Instant),
}

/// How long a partition stopped by a local failure of its files waits before a session tries it again: 30 s, so
/// a full disk freed or a file repaired is picked up within a minute, while a lasting failure costs one session
/// restart per half minute (the link's backoff grows on top).
const LOCAL_RETRY: Duration = Duration::from_secs(30);

/// Index interval used to rebuild an offset or time index the shipper sent as a digest only and without an interval
/// of its own (`Companion::index_interval`, feature bit 3): Kafka's default `index.interval.bytes`. A topic with
/// another interval gets its own from the shipper, which read it off the broker's index; a rebuild that still
/// differs from the broker's is refused by the digest check.
pub const REBUILD_INDEX_INTERVAL_BYTES: u64 = DEFAULT_INDEX_INTERVAL_BYTES;

/// Why the appender refused a chunk or a seal, or could not read its state.
#[derive(Debug, thiserror::Error)]
pub enum TailError {
    #[error("{partition}: topic name {topic:?} is not a valid Kafka topic name; nothing written")]
    BadTopic { partition: String, topic: String },
    #[error("{partition}: chunk at segment {segment} position {position}: {reason}; nothing written")]
    OutOfOrder {
        partition: String,
        segment: i64,
        position: u64,
        reason: String,
    },
    #[error("{partition}: chunk at segment {segment} position {position}: bad batch at byte {at}: {reason}; nothing written")]
    BadBatch {
        partition: String,
        segment: i64,
        position: u64,
        at: u64,
        reason: String,
    },
    #[error("{partition}: chunk at segment {segment} position {position} ({len} bytes) differs from the bytes already durable in {}", path.display())]
    ResendMismatch {
        partition: String,
        segment: i64,
        position: u64,
        len: u64,
        path: PathBuf,
    },
    #[error("{partition}: seal of segment {segment}: {reason}; not sealed")]
    BadSeal {
        partition: String,
        segment: i64,
        reason: String,
    },
    #[error("{partition}: the catalog records the partition {state}; nothing written (a paused or promoted partition is never appended to)")]
    NotWritable {
        partition: String,
        state: String,
        of: PartitionRef,
    },
    #[error("{partition}: the mirror holds source topic id {recorded}, the shipper sends {offered} (the source topic was deleted and recreated); nothing written, the partition stops: `segmirror link reset-partition` mirrors the new topic from its start")]
    LineageBreak {
        partition: String,
        recorded: String,
        offered: String,
        of: PartitionRef,
    },
    /// Writing or reading one partition's files failed on this side (see `Inner::apply_chunks`): that partition
    /// stops for the session; the next session tries it again.
    #[error("{}-{}: {source}; the partition stops, tried again at the next session", of.topic, of.partition)]
    LocalPartition {
        of: PartitionRef,
        #[source]
        source: Box<TailError>,
    },
    /// The partition's directory holds what this appender did not write (the bucket path's install for another
    /// link, files put there by hand): the partition stops until an operator looks.
    #[error("{partition}: {reason}; nothing written, the partition stops")]
    Foreign {
        partition: String,
        reason: String,
        of: PartitionRef,
    },
    #[error("{partition}: cannot continue the mirror `apply` installed: {}: {reason}; nothing written", path.display())]
    HandOver {
        partition: String,
        path: PathBuf,
        reason: String,
    },
    #[error("{partition}: Truncate to offset {truncate_to} (segment {segment} position {position}): {reason}; nothing truncated")]
    Truncate {
        partition: String,
        truncate_to: i64,
        segment: i64,
        position: u64,
        reason: String,
    },
    #[cfg(feature = "failpoints")]
    #[error("failpoint {0:?} hit")]
    Injected(crate::failpoint::FailPoint),
    #[error("catalog: {0}")]
    Catalog(#[from] segmirror_catalog::Error),
    #[error("{}: {reason}", path.display())]
    BadState { path: PathBuf, reason: String },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Format(#[from] segment_format::Error),
}

impl TailError {
    fn io(path: &Path, source: std::io::Error) -> TailError {
        TailError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Whose fault the error is, as the session needs to know it:
    /// - what the shipper sent cannot be applied (a bad batch, a gap, a seal or truncation that does not fit the
    ///   mirror, a name Kafka refuses): [`DirectError::PeerData`], which ends the session only; nothing of it was
    ///   written, and the next session resumes from what is durable;
    /// - one partition cannot be written until an operator acts (recreated source topic, paused or promoted
    ///   partition, files this appender did not write): [`DirectError::PartitionStopped`], and the session goes on
    ///   with the others;
    /// - this side's own failure: one partition's files ([`TailError::LocalPartition`]) stop that partition like
    ///   the above, until the next session tries it again; anything else (the catalog, a group's fsync, the
    ///   mirror's shared state): [`DirectError::Local`], which stops the link.
    pub fn into_direct(self, what: &'static str) -> DirectError {
        match self {
            TailError::BadTopic { .. }
            | TailError::OutOfOrder { .. }
            | TailError::BadBatch { .. }
            | TailError::ResendMismatch { .. }
            | TailError::BadSeal { .. }
            | TailError::Truncate { .. } => DirectError::PeerData {
                what,
                reason: self.to_string(),
            },
            TailError::NotWritable { ref of, .. }
            | TailError::LineageBreak { ref of, .. }
            | TailError::Foreign { ref of, .. }
            | TailError::LocalPartition { ref of, .. } => DirectError::PartitionStopped {
                partition: of.clone(),
                reason: self.to_string(),
            },
            e => DirectError::Local {
                what,
                source: Box::new(e),
            },
        }
    }
}

type TailResult<T> = std::result::Result<T, TailError>;

/// The steps of a truncation a crash test can stop after (`truncate`'s crash protocol; the applier's failpoints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TruncateStep {
    /// The journal is written; nothing else.
    Journaled,
    /// The archive and its sidecar are durable; the mirror not cut.
    Archived,
    /// The mirror's `.log` is cut; the catalog not told.
    Cut,
    /// The catalog recorded it; the state file still names the old end.
    Recorded,
}

/// What the state file records for one partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct PartitionState {
    topic: String,
    partition: i32,
    topic_id: TopicId,
    /// The segment being appended to (or the last sealed one).
    segment_base: i64,
    /// Bytes of that segment durable and recorded.
    position: u64,
    sealed: bool,
    /// The offset the next batch must start at (last durable batch's last offset + 1); `None` before any batch.
    next_offset: Option<i64>,
    /// The transactions open at `position`, for the `.txnindex` entries of ABORT markers still to come
    /// (`companions`); `None` in a state file written before they were recorded, or derived by the hand-over:
    /// then derived from the segments at the next session start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    open_transactions: Option<Vec<companions::OpenTransaction>>,
}

/// The mirror appender over one mirror root. Cloning shares the state (one appender per mirror root).
#[derive(Clone)]
pub struct TailAppender {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    root: PathBuf,
    states: HashMap<String, PartitionState>,
    /// Where sealed segments are recorded and paused/promoted partitions are looked up (`catalog`); `None` only
    /// for an appender without a catalog (tests of the appending alone).
    catalog: Option<TailCatalog>,
    /// How long segments the source deleted are kept ([`retention`]).
    retain_deleted_for: Duration,
    /// The offset and time index of each unsealed segment, as far as recorded (`companions`).
    indexes: companions::IndexMap,
    /// Why each partition stopped in this process (see [`Inner::refused`]), for [`ChunkApplier::writable_again`].
    stops: HashMap<String, StopCause>,
    /// Seals checked against the running digest instead of reading the file (tests check the path taken).
    #[cfg(test)]
    running_seals: u64,
    /// An armed kill point (crash tests).
    #[cfg(feature = "failpoints")]
    failpoint: Option<Arc<crate::failpoint::Armed>>,
}

fn tp_name(p: &PartitionRef) -> String {
    format!("{}-{}", p.topic, p.partition)
}

/// Kafka's topic name rule (`segment_format::dir::validate_topic_name`, the one the frame decoder applies too): a
/// name from a state file or a frame becomes a path under the mirror root only if it passes.
fn valid_topic(topic: &str) -> bool {
    segment_format::dir::validate_topic_name(topic).is_ok()
}

impl TailAppender {
    /// Opens the appender over `root`, reading every partition's state file (the files themselves are checked by
    /// [`ChunkApplier::durable_positions`], at the start of every session).
    pub fn open(root: impl Into<PathBuf>) -> TailResult<TailAppender> {
        let root = root.into();
        let dir = mirror::tail_dir(&root);
        let mut states = HashMap::new();
        match fs::read_dir(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(TailError::io(&dir, e)),
            Ok(entries) => {
                for entry in entries {
                    let entry = entry.map_err(|e| TailError::io(&dir, e))?;
                    let path = entry.path();
                    if !mirror::is_record(&path) {
                        continue; // a `.tmp` a crash left behind: the rename never happened
                    }
                    let bytes = fs::read(&path).map_err(|e| TailError::io(&path, e))?;
                    let state: PartitionState = serde_json::from_slice(&bytes).map_err(|e| TailError::BadState {
                        path: path.clone(),
                        reason: e.to_string(),
                    })?;
                    let name = format!("{}-{}", state.topic, state.partition);
                    if !valid_topic(&state.topic) || path.file_stem().and_then(|s| s.to_str()) != Some(name.as_str()) {
                        return Err(TailError::BadState {
                            path,
                            reason: format!("names partition {name}, not the one its file name says"),
                        });
                    }
                    states.insert(name, state);
                }
            }
        }
        Ok(TailAppender {
            inner: Arc::new(Mutex::new(Inner {
                root,
                states,
                catalog: None,
                retain_deleted_for: DEFAULT_RETAIN_DELETED_FOR,
                indexes: companions::IndexMap::new(),
                stops: HashMap::new(),
                #[cfg(test)]
                running_seals: 0,
                #[cfg(feature = "failpoints")]
                failpoint: None,
            })),
        })
    }

    /// Opens the appender over `root` recording in `catalog` (see `catalog`): what `segmirror tail-apply` runs.
    /// The caller holds the mirror's lock (`crate::lock_mirror`) for as long as the appender is used.
    pub fn open_with_catalog(root: impl Into<PathBuf>, catalog: TailCatalog) -> TailResult<TailAppender> {
        let appender = TailAppender::open(root)?;
        appender.inner.lock().unwrap_or_else(|p| p.into_inner()).catalog = Some(catalog);
        Ok(appender)
    }

    /// Arms a kill point (crash tests): the appender stops there as if the process had died.
    #[cfg(feature = "failpoints")]
    pub fn with_failpoint(self, armed: Arc<crate::failpoint::Armed>) -> TailAppender {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).failpoint = Some(armed);
        self
    }

    async fn run<T, F>(&self, what: &'static str, f: F) -> DirectResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Inner) -> TailResult<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let joined = tokio::task::spawn_blocking(move || {
            // A poisoned lock means an earlier apply panicked mid-way: the state on disk is still the truth.
            let mut guard = inner.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut guard).map_err(|e| guard.refused(e))
        })
        .await;
        match joined {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(e.into_direct(what)),
            Err(e) => Err(DirectError::Local {
                what,
                source: Box::new(e),
            }),
        }
    }
}

impl ChunkApplier for TailAppender {
    fn durable_positions(&mut self) -> impl std::future::Future<Output = DirectResult<Vec<DurablePosition>>> + Send {
        self.run("reading the mirror's durable positions", |i| {
            // Replacements a crash interrupted: completed (journaled) or discarded (not), before anything else.
            i.recover_replacements()?;
            // Truncations a crash interrupted: finished from their journals, before the positions are checked.
            i.recover_truncations()?;
            // Partitions `seed`/`apply` installed and no tail has appended to yet: their state derived.
            i.hand_over()?;
            let positions = i.durable_positions()?;
            // The unsealed segments' `.txnindex`, offset and time index matched to the recorded positions.
            i.recover_companions()?;
            // Deletions a crash interrupted, or that came due while no session ran.
            i.sweep_all()?;
            Ok(positions)
        })
    }

    fn apply_chunk(&mut self, chunk: &Chunk) -> impl std::future::Future<Output = DirectResult<()>> + Send {
        let chunk = chunk.clone();
        self.run("appending a chunk to the mirror", move |i| {
            i.apply_chunks(std::slice::from_ref(&chunk))
        })
    }

    fn apply_chunks(&mut self, chunks: &[Chunk]) -> impl std::future::Future<Output = DirectResult<()>> + Send {
        let chunks = chunks.to_vec();
        self.run("appending chunks to the mirror", move |i| i.apply_chunks(&chunks))
    }

    fn check_applied(&mut self, chunk: &Chunk) -> impl std::future::Future<Output = DirectResult<()>> + Send {
        let chunk = chunk.clone();
        self.run("comparing a resent chunk with the mirror", move |i| {
            i.check_applied(&chunk)
        })
    }

    fn apply_seal(&mut self, seal: &SegmentSeal) -> impl std::future::Future<Output = DirectResult<()>> + Send {
        let seal = seal.clone();
        self.run("sealing a mirror segment", move |i| {
            i.apply_seal(&seal)?;
            i.sweep_partition(&tp_name(&seal.partition))
        })
    }

    fn apply_log_start(&mut self, log_start: &LogStart) -> impl std::future::Future<Output = DirectResult<()>> + Send {
        let log_start = log_start.clone();
        self.run("applying the source's log start", move |i| {
            i.apply_log_start(&log_start)
        })
    }

    fn apply_progress(
        &mut self,
        report: &SourceProgress,
    ) -> impl std::future::Future<Output = DirectResult<()>> + Send {
        let report = report.clone();
        self.run("recording the source's progress", move |i| {
            // Advisory (see `progress`): a failure is logged, never the session's.
            let installed_end = i.states.get(&tp_name(&report.partition)).and_then(|s| s.next_offset);
            if let Err(reason) = progress::record(&i.root, &report, installed_end) {
                tracing::warn!(partition = %tp_name(&report.partition), %reason, "source progress not recorded");
            }
            Ok(())
        })
    }

    fn log_ends(
        &mut self,
        positions: &[DurablePosition],
    ) -> impl std::future::Future<Output = DirectResult<Option<Vec<LogEnd>>>> + Send {
        let positions = positions.to_vec();
        self.run("reading the mirror's log ends", move |i| {
            i.log_ends(&positions).map(Some)
        })
    }

    fn apply_truncate(
        &mut self,
        truncate: &Truncate,
    ) -> impl std::future::Future<Output = DirectResult<Option<Position>>> + Send {
        let truncate = truncate.clone();
        self.run("truncating the mirror", move |i| i.apply_truncate(&truncate))
    }

    fn mirror_layout(
        &mut self,
    ) -> impl std::future::Future<Output = DirectResult<Vec<(PartitionRef, Vec<LayoutSegment>)>>> + Send {
        self.run("listing the mirror's sealed segments", |i| i.mirror_layout())
    }

    fn apply_replace(&mut self, piece: &SegmentReplace) -> impl std::future::Future<Output = DirectResult<()>> + Send {
        let piece = piece.clone();
        self.run("applying a replacement of sealed segments", move |i| {
            i.apply_replace(&piece)
        })
    }

    fn apply_link_meta(
        &mut self,
        meta: segmirror_transport::link_meta::LinkMeta,
    ) -> impl std::future::Future<Output = DirectResult<()>> + Send {
        self.run("recording the link's metadata", move |i| {
            // Advisory like a progress report: a version not recorded is logged, the next one replaces it.
            let Some(catalog) = &mut i.catalog else {
                return Ok(());
            };
            let (topics, offsets) = (meta.topics.topics.len(), meta.offsets.offsets.len());
            match catalog.record_link_meta(&meta) {
                Ok(version) => {
                    tracing::info!(
                        version,
                        topics,
                        offsets,
                        "recorded the link's metadata (topics, consumer offsets)"
                    )
                }
                Err(e) => tracing::warn!(error = %e, "the link's metadata was not recorded"),
            }
            Ok(())
        })
    }

    fn claim(
        &mut self,
        node: i32,
        claim: &Claim,
    ) -> impl std::future::Future<Output = DirectResult<ClaimDecision>> + Send {
        let claim = claim.clone();
        self.run("recording a shipper's claim", move |i| i.claim(node, &claim))
    }

    fn writable_again(
        &mut self,
        stopped: &[PartitionRef],
    ) -> impl std::future::Future<Output = DirectResult<bool>> + Send {
        let stopped = stopped.to_vec();
        self.run("reading whether a stopped partition may be applied again", move |i| {
            for p in &stopped {
                let name = tp_name(p);
                let again = match (i.stops.get(&name), &mut i.catalog) {
                    // Files this appender did not write: an operator looks, and restarts the applier.
                    (Some(StopCause::Foreign), _) => false,
                    (Some(StopCause::Local(at)), _) => at.elapsed() >= LOCAL_RETRY,
                    (_, Some(catalog)) => catalog.writable_again(p)?,
                    (_, None) => false,
                };
                if again {
                    i.stops.remove(&name);
                    return Ok(true);
                }
            }
            Ok(false)
        })
    }

    fn apply_roll(&mut self, roll: &Roll) -> impl std::future::Future<Output = DirectResult<()>> + Send {
        let roll = roll.clone();
        self.run("rolling a mirror-layout segment", move |i| {
            i.apply_roll(&roll)?;
            i.sweep_partition(&tp_name(&roll.partition))
        })
    }
}

impl Inner {
    /// What a refusal leaves behind before the session hears of it: a partition's stop is remembered with its
    /// cause (for [`ChunkApplier::writable_again`]), and a lineage break also pauses the partition in the catalog,
    /// with an event that says what to do (`status` shows both). Recording it is best effort: the refusal stands
    /// either way.
    fn refused(&mut self, e: TailError) -> TailError {
        let (of, cause) = match &e {
            TailError::LineageBreak { of, .. } => (of, StopCause::Lineage),
            TailError::NotWritable { of, .. } => (of, StopCause::Paused),
            TailError::Foreign { of, .. } => (of, StopCause::Foreign),
            TailError::LocalPartition { of, .. } => (of, StopCause::Local(std::time::Instant::now())),
            _ => return e,
        };
        if let (StopCause::Lineage, Some(catalog)) = (&cause, &mut self.catalog) {
            if let Err(record) = catalog.hold_lineage(of) {
                tracing::warn!(partition = %tp_name(of), error = %record, "the lineage break was not recorded");
            }
        }
        self.stops.insert(tp_name(of), cause);
        e
    }

    /// The operator accepted `p`'s new lineage (`segmirror link reset-partition`): what the mirror holds of the old
    /// one is moved under `.archive/<topic>-<partition>/lineage-<old id>-<ms>/` (never deleted), its state files
    /// go, and the catalog records the new lineage with no segments, so the shipper's chunks from 0 install the new
    /// topic from its start. Files first, the catalog last: a crash in between repeats what is left at the next
    /// chunk (the lineage stays pending until the switch is recorded).
    fn reset_lineage(&mut self, p: &PartitionRef) -> TailResult<()> {
        let name = tp_name(p);
        let old = self.states.get(&name).map(|s| Uuid(s.topic_id).to_string());
        if let Some(to) = self.archive_partition(p, &format!("lineage-{}", old.as_deref().unwrap_or("unknown")))? {
            tracing::warn!(partition = %name, archived = %to.display(), "lineage reset: the old lineage's files archived");
        }
        if let Some(catalog) = &mut self.catalog {
            catalog.switch_lineage(p)?;
        }
        Ok(())
    }

    /// Moves the partition's directory to `.archive/<topic>-<partition>/<label>-<ms>/` (never deleted) and forgets
    /// its state (the state file, retention and progress records): the partition starts afresh at the next chunk.
    /// Returns where the files went (`None`: there were none). Idempotent: a crash part-way is finished by a rerun.
    fn archive_partition(&mut self, p: &PartitionRef, label: &str) -> TailResult<Option<PathBuf>> {
        let name = tp_name(p);
        let pdir = self.partition_dir(&p.topic, p.partition);
        let mut moved = None;
        if pdir.exists() {
            let archive = mirror::partition_archive_dir(&self.root, &name);
            fs::create_dir_all(&archive).map_err(|e| TailError::io(&archive, e))?;
            let to = archive.join(format!("{label}-{}", segment_format::now_ms()));
            fs::rename(&pdir, &to).map_err(|e| TailError::io(&pdir, e))?;
            fsync_dir(&archive)?;
            fsync_dir(&self.root)?;
            moved = Some(to);
        }
        for path in [
            self.state_path(&name),
            retention::record_path(&self.root, &name),
            progress_path(&self.root, &p.topic, p.partition),
        ] {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(TailError::io(&path, e)),
            }
        }
        fsync_dir(&mirror::tail_dir(&self.root))?;
        self.states.remove(&name);
        self.indexes.remove(&name);
        Ok(moved)
    }

    /// Stops here when a crash test armed this step's kill point.
    fn kill_point(&self, step: TruncateStep) -> TailResult<()> {
        #[cfg(feature = "failpoints")]
        {
            use crate::failpoint::FailPoint;
            let point = match step {
                TruncateStep::Journaled => FailPoint::TruncateJournaled,
                TruncateStep::Archived => FailPoint::TruncateArchived,
                TruncateStep::Cut => FailPoint::TruncateCut,
                TruncateStep::Recorded => FailPoint::TruncateRecorded,
            };
            crate::failpoint::hit(self.failpoint.as_deref(), point).map_err(|i| TailError::Injected(i.0))?;
        }
        #[cfg(not(feature = "failpoints"))]
        let _ = step;
        Ok(())
    }

    fn partition_dir(&self, topic: &str, partition: i32) -> PathBuf {
        mirror::partition_dir(&self.root, topic, partition)
    }

    fn log_path(&self, topic: &str, partition: i32, base: i64) -> PathBuf {
        self.partition_dir(topic, partition)
            .join(segment_file_name(base, SegmentFileKind::Log))
    }

    fn state_path(&self, name: &str) -> PathBuf {
        mirror::state_file(&self.root, name)
    }

    fn record(&mut self, name: String, state: PartitionState) -> TailResult<()> {
        let dir = mirror::tail_dir(&self.root);
        if !dir.exists() {
            fs::create_dir_all(&dir).map_err(|e| TailError::io(&dir, e))?;
            fsync_dir(&self.root)?;
        }
        let bytes = serde_json::to_vec_pretty(&state).map_err(|e| TailError::BadState {
            path: self.state_path(&name),
            reason: e.to_string(),
        })?;
        write_atomically(&self.state_path(&name), &bytes)?;
        self.states.insert(name, state);
        Ok(())
    }

    /// The recorded positions, after putting each active file back to its recorded length.
    fn durable_positions(&mut self) -> TailResult<Vec<DurablePosition>> {
        let mut out = Vec::with_capacity(self.states.len());
        let mut names: Vec<&String> = self.states.keys().collect();
        names.sort();
        for name in names {
            let s = &self.states[name];
            let path = self.log_path(&s.topic, s.partition, s.segment_base);
            let len = match fs::metadata(&path) {
                Ok(m) => m.len(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && s.position == 0 => 0,
                Err(e) => return Err(TailError::io(&path, e)),
            };
            if len < s.position {
                return Err(TailError::BadState {
                    path,
                    reason: format!(
                        "{len} bytes on disk, but {} bytes were recorded durable (and acknowledged): lost data",
                        s.position
                    ),
                });
            }
            if len > s.position {
                if s.sealed {
                    return Err(TailError::BadState {
                        path,
                        reason: format!("sealed at {} bytes but {len} bytes on disk", s.position),
                    });
                }
                // Written but never recorded, hence never acknowledged: the shipper sends them again.
                tracing::warn!(path = %path.display(), recorded = s.position, on_disk = len,
                    "truncating unacknowledged bytes after a crash");
                let file = OpenOptions::new()
                    .write(true)
                    .open(&path)
                    .map_err(|e| TailError::io(&path, e))?;
                file.set_len(s.position).map_err(|e| TailError::io(&path, e))?;
                file.sync_all().map_err(|e| TailError::io(&path, e))?;
            }
            out.push(DurablePosition {
                position: Position {
                    partition: PartitionRef {
                        topic: s.topic.clone(),
                        partition: s.partition,
                        topic_id: s.topic_id,
                    },
                    segment_base: s.segment_base,
                    position: s.position,
                },
                sealed: s.sealed,
            });
        }
        Ok(out)
    }

    /// Appends a group of chunks (the session's group commit): every chunk checked and written in order, then
    /// each file written to fsynced once (and its directory when the file is new), then each partition's state
    /// recorded once. On an error nothing more is recorded: bytes written and not recorded were never acknowledged,
    /// and are cut off by the next write to the segment or at the next session start.
    fn apply_chunks(&mut self, chunks: &[Chunk]) -> TailResult<()> {
        let mut unsynced = Unsynced::new();
        for chunk in chunks {
            match self.write_chunk(chunk, &mut unsynced) {
                Err(TailError::LineageBreak { .. }) if self.lineage_accepted(&chunk.partition)? => {
                    // What the group wrote before is made durable and recorded first.
                    self.commit(std::mem::take(&mut unsynced))?;
                    self.reset_lineage(&chunk.partition)?;
                    self.write_chunk(chunk, &mut unsynced)?;
                }
                // This partition's files cannot be written or read (a full or failing disk under its directory, a
                // state file damaged): it stops, the others go on, and it is tried again at the next session.
                Err(e @ (TailError::Io { .. } | TailError::BadState { .. } | TailError::Format(_))) => {
                    return Err(TailError::LocalPartition {
                        of: chunk.partition.clone(),
                        source: Box::new(e),
                    })
                }
                r => r?,
            }
        }
        self.commit(unsynced)
    }

    /// The unsealed segment `s` names holds bytes its source does not (its seal's digest differs): they are moved out
    /// of the way, never deleted, and the segment starts again at byte 0, so the next session's Resume makes the
    /// shipper send it again from its start. A segment above sealed ones is cut as a source truncation is
    /// (archived, recorded in the catalog: `truncate`); the partition's only segment goes to
    /// `.archive/<topic>-<partition>/quarantine-<ms>/` with the partition's state, so the partition starts afresh.
    /// Says what was done.
    fn quarantine_segment(&mut self, s: &PartitionState, p: &PartitionRef) -> TailResult<String> {
        let name = tp_name(p);
        let pdir = self.partition_dir(&p.topic, p.partition);
        let listed = segment_format::dir::PartitionDir::open(&pdir)?.segments;
        let first = listed.first().map_or(s.segment_base, |f| f.base_offset);
        if first < s.segment_base {
            let durable = DurablePosition {
                position: Position {
                    partition: p.clone(),
                    segment_base: s.segment_base,
                    position: s.position,
                },
                sealed: s.sealed,
            };
            let end = truncate::log_end(&pdir, &durable)?;
            let cut = Truncate {
                partition: p.clone(),
                truncate_to: s.segment_base,
                segment_base: s.segment_base,
                position: 0,
                mode: segmirror_transport::direct::payload::TruncateMode::LogEnd,
                mirror_end_offset: end.end_offset,
                mirror_epoch: end.last_epoch,
                source_epoch: -1,
                source_end_offset: s.segment_base,
            };
            self.apply_truncate(&cut)?;
            tracing::error!(partition = %name, segment = s.segment_base,
                "the mirror's segment differs from the source's: archived, and resent from its start");
            return Ok(format!(
                "the segment's {} bytes were archived (as a truncation) and it is resent from its start",
                s.position
            ));
        }
        let installed = match &mut self.catalog {
            Some(catalog) => catalog.installed_segments(p)?.len(),
            None => 0,
        };
        if installed > 0 {
            return Ok("not quarantined: the catalog records installed segments of the partition".into());
        }
        let to = self.archive_partition(p, "quarantine")?.unwrap_or_default();
        tracing::error!(partition = %name, archived = %to.display(),
            "the mirror's only segment differs from the source's: archived, and the partition resent from its start");
        Ok(format!(
            "the partition's files were archived in {} and it is resent from its start",
            to.display()
        ))
    }

    /// Whether the operator accepted `p`'s lineage in place of the mirror's (see [`Inner::reset_lineage`]).
    fn lineage_accepted(&mut self, p: &PartitionRef) -> TailResult<bool> {
        match &mut self.catalog {
            Some(catalog) => catalog.lineage_accepted(p),
            None => Ok(false),
        }
    }

    /// Makes what `unsynced` holds durable, then records it: the record never claims more than is durable.
    fn commit(&mut self, unsynced: Unsynced) -> TailResult<()> {
        for w in unsynced.values() {
            let file = File::open(&w.path).map_err(|e| TailError::io(&w.path, e))?;
            file.sync_all().map_err(|e| TailError::io(&w.path, e))?;
            // On disk now: its pages freed for the next group's writes (`durable::drop_cached`).
            drop_cached(&file, w.state.position);
            if w.created {
                if let Some(pdir) = w.path.parent() {
                    fsync_dir(pdir)?;
                }
            }
        }
        for (name, w) in unsynced {
            self.record(name, w.state)?;
        }
        Ok(())
    }

    /// Checks `chunk` against where its partition stands (recorded, or as the group's chunks before it left it)
    /// and writes it, not yet durable: noted in `unsynced`.
    fn write_chunk(&mut self, chunk: &Chunk, unsynced: &mut Unsynced) -> TailResult<()> {
        let p = &chunk.partition;
        let name = tp_name(p);
        if !valid_topic(&p.topic) || p.partition < 0 {
            return Err(TailError::BadTopic {
                partition: name,
                topic: p.topic.clone(),
            });
        }
        let order = |reason: String| TailError::OutOfOrder {
            partition: name.clone(),
            segment: chunk.segment_base,
            position: chunk.position,
            reason,
        };
        let prev = unsynced
            .get(&name)
            .map(|w| w.state.clone())
            .or_else(|| self.states.get(&name).cloned());
        // The unsealed segment the chunk passes over, deleted by the source's retention (see below).
        let mut passed_unsealed = None;
        // Where the chunk must start, and the offset its first batch must carry (None: any offset at or above
        // the segment base).
        let (new_segment, min_offset, floor_offset) = match &prev {
            None => {
                if chunk.position != 0 {
                    return Err(order(
                        "nothing of the partition is durable, a first chunk must start at 0".into(),
                    ));
                }
                (true, chunk.segment_base, None)
            }
            Some(s) => {
                if s.topic_id != p.topic_id {
                    return Err(TailError::LineageBreak {
                        partition: name.clone(),
                        recorded: Uuid(s.topic_id).to_string(),
                        offered: Uuid(p.topic_id).to_string(),
                        of: p.clone(),
                    });
                }
                if chunk.segment_base == s.segment_base {
                    if s.sealed {
                        return Err(order(format!("the segment is sealed at {}", s.position)));
                    }
                    if chunk.position != s.position {
                        return Err(order(format!("the durable bytes end at {}", s.position)));
                    }
                    // A segment claimed at 0 (see below) takes its first batch as a new segment does.
                    let floor = if s.position == 0 { None } else { s.next_offset };
                    (false, chunk.segment_base, floor)
                } else if chunk.segment_base > s.segment_base {
                    // The source deleted the unsealed segment (a LogStart at or above this chunk's segment came
                    // first): it will never be sealed and goes as retention deletes (`retention`, "The segment
                    // being tailed"). Otherwise a segment is left only once sealed.
                    let deleted_at_source = !s.sealed
                        && chunk.position == 0
                        && self.recorded_log_start(&name)?.is_some_and(|l| l >= chunk.segment_base);
                    if deleted_at_source {
                        passed_unsealed = Some((s.segment_base, s.position));
                    } else if !s.sealed {
                        return Err(order(format!(
                            "segment {} is not sealed yet (durable to {})",
                            s.segment_base, s.position
                        )));
                    }
                    if chunk.position != 0 {
                        return Err(order("the first chunk of a new segment must start at 0".into()));
                    }
                    let next = s.next_offset.unwrap_or(s.segment_base);
                    if chunk.segment_base < next {
                        return Err(order(format!(
                            "segment base {} is below the next offset {next} of the sealed segment {}",
                            chunk.segment_base, s.segment_base
                        )));
                    }
                    (true, chunk.segment_base, None)
                } else {
                    return Err(order(format!("older than the durable segment {}", s.segment_base)));
                }
            }
        };
        let (last_offset, batches) = validate_batches(chunk, &name, min_offset, floor_offset)?;
        if let Some(catalog) = &mut self.catalog {
            catalog.check_writable(p, Some(chunk.segment_base))?;
        }
        // The `.txnindex` entries and index entries the chunk adds, and the transactions open after it.
        // Continuing a chunk of this group: its open transactions are not recorded yet.
        let group_open = unsynced.get(&name).and_then(|w| w.state.open_transactions.clone());
        let mut companions = self.chunk_companions(&name, chunk, &batches, new_segment, group_open)?;

        // Only now is anything written.
        let pdir = self.partition_dir(&p.topic, p.partition);
        let path = self.log_path(&p.topic, p.partition, chunk.segment_base);
        if new_segment {
            // The claim below is recorded at once: what the group wrote before it is made durable and recorded
            // first, so a record never runs ahead of the bytes.
            self.commit(std::mem::take(unsynced))?;
            // A file the record does not claim was not written here (the bucket install path, another
            // lineage): never truncated, never appended to.
            let foreign = match &prev {
                None => holds_logs(&pdir)?,
                Some(_) => path.exists(),
            };
            if foreign {
                // Installed by `apply` for another link than this applier's: say so (`handover`).
                let others = match &self.catalog {
                    Some(catalog) => catalog.other_links(&p.topic, p.partition)?,
                    None => Vec::new(),
                };
                if let (false, Some(catalog)) = (others.is_empty(), &self.catalog) {
                    return Err(TailError::Foreign {
                        partition: name.clone(),
                        reason: format!(
                            "cannot continue the mirror `apply` installed in {}: the catalog records it under link \
                             {}, this applier serves link {} (use the link `apply` used)",
                            pdir.display(),
                            others.join(", "),
                            catalog.link()
                        ),
                        of: p.clone(),
                    });
                }
                return Err(TailError::Foreign {
                    partition: name.clone(),
                    reason: format!(
                        "{} already holds segments the tail appender did not write",
                        pdir.display()
                    ),
                    of: p.clone(),
                });
            }
            if !pdir.exists() {
                fs::create_dir_all(&pdir).map_err(|e| TailError::io(&pdir, e))?;
                fsync_dir(&self.root)?;
            }
            if let Some((base, position)) = passed_unsealed {
                self.note_unsealed_deleted(&name, base, position)?;
            }
            // Claim the new segment at 0 bytes before creating it: a crash after the create leaves a file the
            // record owns (truncated back to 0 at restart), never an unclaimed one refused above.
            let claim = PartitionState {
                topic: p.topic.clone(),
                partition: p.partition,
                topic_id: p.topic_id,
                segment_base: chunk.segment_base,
                position: 0,
                sealed: false,
                next_offset: prev.as_ref().and_then(|s| s.next_offset),
                open_transactions: Some(
                    self.states
                        .get(&name)
                        .and_then(|s| s.open_transactions.clone())
                        .unwrap_or_default(),
                ),
            };
            self.record(name.clone(), claim)?;
            if passed_unsealed.is_some() {
                // The claim moved past it: the sweep deletes it now (a crash from here on: at session start).
                self.sweep_partition(&name)?;
            }
        }
        // Only a segment at 0 may be created; a missing file with recorded bytes is lost data, never zero-filled.
        let mut file = OpenOptions::new()
            .write(true)
            .create(chunk.position == 0)
            .truncate(false)
            .open(&path)
            .map_err(|e| TailError::io(&path, e))?;
        let len = file.metadata().map_err(|e| TailError::io(&path, e))?.len();
        if len < chunk.position {
            return Err(TailError::BadState {
                path,
                reason: format!(
                    "{len} bytes on disk, but {} were recorded durable: lost data",
                    chunk.position
                ),
            });
        }
        // Bytes beyond the record were never acknowledged (a failed earlier attempt).
        file.set_len(chunk.position).map_err(|e| TailError::io(&path, e))?;
        file.seek(SeekFrom::Start(chunk.position))
            .map_err(|e| TailError::io(&path, e))?;
        file.write_all(&chunk.bytes).map_err(|e| TailError::io(&path, e))?;
        write_behind(&file, chunk.position, chunk.bytes.len() as u64);
        drop(file);
        // The `.txnindex` entries durable (a crash before the record: cut back at the next start), the index
        // entries written; the directory entry of a new file is made durable with the group (`commit`).
        self.write_chunk_companions(&pdir, chunk, &mut companions)?;
        let state = PartitionState {
            topic: p.topic.clone(),
            partition: p.partition,
            topic_id: p.topic_id,
            segment_base: chunk.segment_base,
            position: chunk.position + chunk.bytes.len() as u64,
            sealed: false,
            next_offset: Some(last_offset + 1),
            open_transactions: Some(companions.open.clone()),
        };
        let created = chunk.position == 0 || unsynced.get(&name).is_some_and(|w| w.created);
        unsynced.insert(name.clone(), Unsynced1 { path, state, created });
        // Kept at the chunk's end so the group's next chunk of the partition continues them; should the group
        // fail, they are ahead of the record and the next chunk (at the recorded position) rebuilds them.
        self.keep_indexes(name, companions);
        Ok(())
    }

    fn check_applied(&mut self, chunk: &Chunk) -> TailResult<()> {
        let p = &chunk.partition;
        let name = tp_name(p);
        let len = chunk.bytes.len() as u64;
        let order = |reason: String| TailError::OutOfOrder {
            partition: name.clone(),
            segment: chunk.segment_base,
            position: chunk.position,
            reason,
        };
        let Some(s) = self.states.get(&name) else {
            return Err(order("nothing of the partition is durable".into()));
        };
        if !valid_topic(&p.topic) || s.topic_id != p.topic_id {
            return Err(order("not the mirrored topic (name or topic id)".into()));
        }
        let end = chunk.position.saturating_add(len);
        if chunk.segment_base > s.segment_base || (chunk.segment_base == s.segment_base && end > s.position) {
            return Err(order(format!(
                "not below the durable end (segment {} position {})",
                s.segment_base, s.position
            )));
        }
        let path = self.log_path(&p.topic, p.partition, chunk.segment_base);
        let mut file = File::open(&path).map_err(|e| TailError::io(&path, e))?;
        let mut on_disk = vec![0u8; chunk.bytes.len()];
        file.seek(SeekFrom::Start(chunk.position))
            .map_err(|e| TailError::io(&path, e))?;
        let same = match file.read_exact(&mut on_disk) {
            Ok(()) => on_disk == chunk.bytes.as_ref(),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => false,
            Err(e) => return Err(TailError::io(&path, e)),
        };
        if same {
            Ok(())
        } else {
            Err(TailError::ResendMismatch {
                partition: name.clone(),
                segment: chunk.segment_base,
                position: chunk.position,
                len,
                path,
            })
        }
    }

    fn apply_seal(&mut self, seal: &SegmentSeal) -> TailResult<()> {
        let p = &seal.partition;
        let name = tp_name(p);
        let bad = |reason: String| TailError::BadSeal {
            partition: name.clone(),
            segment: seal.segment_base,
            reason,
        };
        let Some(s) = self.states.get(&name).cloned() else {
            return Err(bad("nothing of the partition is durable".into()));
        };
        if s.topic_id != p.topic_id || s.segment_base != seal.segment_base || s.position != seal.final_size {
            return Err(bad(format!(
                "final size {} but the durable bytes end at segment {} position {}",
                seal.final_size, s.segment_base, s.position
            )));
        }
        if s.sealed {
            return Ok(());
        }
        if let Some(catalog) = &mut self.catalog {
            catalog.check_writable(p, None)?;
        }
        // The seal's companions replace the ones kept while the segment was active; their running digest, when
        // they cover the whole segment, spares reading it again (`companions`).
        let path = self.log_path(&p.topic, p.partition, seal.segment_base);
        let sealing = self.sealing(&name, seal.segment_base, s.position, &path)?;
        #[cfg(test)]
        {
            self.running_seals += u64::from(sealing.is_some());
        }
        let (size, sha) = match &sealing {
            Some(kept) => (s.position, kept.sha256),
            None => {
                let on_disk = digest_file(&path)?;
                (on_disk.size, on_disk.sha256.0)
            }
        };
        // Rebuilt as `rebuild_index_with` would, from what was kept when the interval is the one kept at.
        let rebuilt = |kind: CompanionKind, interval: u64| -> TailResult<Vec<u8>> {
            match (&sealing, kind) {
                (Some(kept), CompanionKind::OffsetIndex) if interval == REBUILD_INDEX_INTERVAL_BYTES => {
                    Ok(kept.offsets.clone())
                }
                (Some(kept), CompanionKind::TimeIndex) if interval == REBUILD_INDEX_INTERVAL_BYTES => {
                    Ok(kept.times.clone())
                }
                _ => rebuild_index_with(&path, seal.segment_base, kind, interval),
            }
        };
        if size != seal.final_size {
            return Err(bad(format!(
                "{} holds {size} bytes, not {}",
                path.display(),
                seal.final_size
            )));
        }
        if sha != seal.log_sha256 {
            let differs = format!(
                "SHA-256 of {} is {}, the seal says {}",
                path.display(),
                hex(&sha),
                hex(&seal.log_sha256)
            );
            // The mirror holds bytes the source does not (a forged chunk, valid batches, applied before this seal
            // could show it): quarantined like a source truncation, and the segment resent from its start.
            let done = match self.quarantine_segment(&s, p) {
                Ok(done) => done,
                // The bytes cannot even be read as batches: left as they are for an operator (the seal stays
                // refused, the session ends, nothing more is appended to the segment).
                Err(e) => format!("not quarantined: {e}"),
            };
            return Err(bad(format!("{differs}; {done}")));
        }
        // Companions: all checked before any is written.
        let mut files = Vec::with_capacity(seal.companions.len());
        for (i, c) in seal.companions.iter().enumerate() {
            if seal.companions[..i].iter().any(|o| o.kind == c.kind) {
                return Err(bad(format!("companion {:?} listed twice", c.kind)));
            }
            let bytes = match (&c.inline, c.kind) {
                (Some(b), _) => b.to_vec(),
                (None, CompanionKind::OffsetIndex | CompanionKind::TimeIndex) => rebuilt(c.kind, rebuild_interval(c))?,
                (None, kind) => {
                    return Err(bad(format!(
                        "companion {kind:?} sent as a digest only; it cannot be rebuilt"
                    )))
                }
            };
            let digest = sha256(&bytes);
            if bytes.len() as u64 != c.size || digest != c.sha256 {
                return Err(bad(format!(
                    "companion {:?}{}: {} bytes SHA-256 {}, the seal says {} bytes SHA-256 {}",
                    c.kind,
                    match c.inline {
                        Some(_) => String::new(),
                        None => format!(" (rebuilt) with index.interval.bytes {}", rebuild_interval(c)),
                    },
                    bytes.len(),
                    hex(&digest),
                    c.size,
                    hex(&c.sha256)
                )));
            }
            let kind =
                match c.kind {
                    CompanionKind::OffsetIndex => SegmentFileKind::Index,
                    CompanionKind::TimeIndex => SegmentFileKind::TimeIndex,
                    CompanionKind::TxnIndex => SegmentFileKind::TxnIndex,
                    CompanionKind::ProducerSnapshot => return Err(bad(
                        "a producer snapshot companion cannot be placed: it is named after the next segment's base, \
                         which a version 1 seal does not carry"
                            .into(),
                    )),
                };
            files.push((kind, bytes));
        }
        let pdir = self.partition_dir(&p.topic, p.partition);
        // An offset or time index the seal does not carry (the broker had none) is rebuilt as a rolled segment's
        // rather than left as the appender kept it while active (`companions`: a time index without its final
        // entry); the appender's `.txnindex` stays (its entries are the broker's rule).
        for (kind, companion) in [
            (SegmentFileKind::Index, CompanionKind::OffsetIndex),
            (SegmentFileKind::TimeIndex, CompanionKind::TimeIndex),
        ] {
            if !files.iter().any(|(k, _)| *k == kind) && pdir.join(segment_file_name(seal.segment_base, kind)).exists()
            {
                files.push((kind, rebuilt(companion, REBUILD_INDEX_INTERVAL_BYTES)?));
            }
        }
        for (kind, bytes) in files {
            write_atomically(&pdir.join(segment_file_name(seal.segment_base, kind)), &bytes)?;
        }
        if let Some(catalog) = &mut self.catalog {
            // After the bytes and companions are durable, before the state file says sealed (`catalog`).
            let next_offset = s
                .next_offset
                .filter(|_| s.position > 0)
                .ok_or_else(|| bad("the segment holds no batch".into()))?;
            let record = catalog::SealRecord {
                segment_base: seal.segment_base,
                next_offset,
                size,
                sha256: sha,
            };
            catalog.record_seal(p, &record)?;
        }
        self.record(name, PartitionState { sealed: true, ..s })
    }
}

/// Chunks of a group written and not yet durable, per partition (see `Inner::apply_chunks`).
type Unsynced = HashMap<String, Unsynced1>;

/// One partition's part of [`Unsynced`].
struct Unsynced1 {
    /// The segment file written to.
    path: PathBuf,
    /// The state the partition will be recorded in.
    state: PartitionState,
    /// The file was created by the group: its directory entry needs an fsync too.
    created: bool,
}

/// Checks every batch of `chunk` before anything is written ([`crate::chunk_rule`], v2 batches only); returns the
/// last batch's last offset and the batches. `floor`: the offset after the durable batches the chunk continues,
/// `None` for the first chunk of a segment (its first batch anywhere at or above `min_offset`, the segment base).
fn validate_batches(
    chunk: &Chunk,
    name: &str,
    min_offset: i64,
    floor: Option<i64>,
) -> TailResult<(i64, Vec<segment_format::batch::BatchInfo>)> {
    let bad = |at: u64, reason: String| TailError::BadBatch {
        partition: name.to_string(),
        segment: chunk.segment_base,
        position: chunk.position,
        at,
        reason,
    };
    if chunk.bytes.is_empty() {
        return Err(bad(chunk.position, "an empty chunk".into()));
    }
    let floor = floor.map_or(Floor::SegmentBase(min_offset), Floor::After);
    let mut rule = ChunkRule::new(floor, LegacyFrames::Refuse);
    // The CRCs the frame decoder computed for the large batches while it checked the frame's CRC are taken, not
    // computed again (`ChunkCrcs::batches`).
    let mut iter = scan_frames_known(&chunk.bytes, chunk.position, &chunk.crcs.batches);
    let mut batches = Vec::new();
    for frame in iter.by_ref() {
        let frame = frame.map_err(|e| match e {
            segment_format::ParseError::Incomplete {
                position,
                needed,
                available,
                ..
            } => bad(
                position,
                format!("the chunk does not end on a batch boundary (a batch of {needed} bytes, {available} present)"),
            ),
            segment_format::ParseError::Corrupt { position, defect, .. } => bad(position, format!("{defect:?}")),
        })?;
        let at = frame.info.position;
        rule.accept(&frame).map_err(|defect| match defect {
            BatchDefect::Crc { stored, computed } => bad(
                frame.crc_position(),
                format!("CRC stored {stored:#010x}, computed {computed:#010x}"),
            ),
            BatchDefect::Legacy { magic } => bad(at, format!("magic {magic} (only v2 batches are tailed)")),
            BatchDefect::BaseBelowExpected { base, expected, .. } => bad(
                at,
                format!(
                    "base offset {base}, expected at least {expected} (previous batch's last offset + 1: offsets \
                     must increase)"
                ),
            ),
            BatchDefect::BaseBelowSegment { base, segment_base, .. } => {
                bad(at, format!("base offset {base} below the segment base {segment_base}"))
            }
            BatchDefect::LastBelowBase { base, last } => {
                bad(at, format!("last offset {last} below base offset {base}"))
            }
        })?;
        batches.push(frame.info);
    }
    let end = chunk.position + chunk.bytes.len() as u64;
    let last = rule.finish(iter.next_position(), end).map_err(|defect| match defect {
        ChunkDefect::NotOnBoundary { end } => bad(end, "the chunk does not end on a batch boundary".into()),
        ChunkDefect::NoBatch => bad(chunk.position, "no batch".into()),
    })?;
    Ok((last, batches))
}

/// Whether `dir` holds any `.log` file (a missing directory holds none).
fn holds_logs(dir: &Path) -> TailResult<bool> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(TailError::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| TailError::io(dir, e))?;
        if entry.path().extension().and_then(|e| e.to_str()) == Some("log") {
            return Ok(true);
        }
    }
    Ok(false)
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    digest_of(bytes).sha256.0
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The interval a digest-only index companion is rebuilt with: its own, else [`REBUILD_INDEX_INTERVAL_BYTES`].
pub(crate) fn rebuild_interval(c: &Companion) -> u64 {
    c.index_interval.map_or(REBUILD_INDEX_INTERVAL_BYTES, u64::from)
}

/// Rebuilds an offset or time index from the sealed log with [`REBUILD_INDEX_INTERVAL_BYTES`].
#[cfg(test)]
pub(crate) fn rebuild_index(path: &Path, base: i64, kind: CompanionKind) -> TailResult<Vec<u8>> {
    rebuild_index_with(path, base, kind, REBUILD_INDEX_INTERVAL_BYTES)
}

/// Rebuilds an offset or time index from the sealed log with `interval` (`index.interval.bytes`).
pub(crate) fn rebuild_index_with(path: &Path, base: i64, kind: CompanionKind, interval: u64) -> TailResult<Vec<u8>> {
    let mut log = LogFile::open(path)?;
    let mut offsets = OffsetIndexBuilder::new(base, interval);
    let mut times = TimeIndexBuilder::new(base, interval);
    let mut failed = None;
    log.scan(|frame| {
        let r = match kind {
            CompanionKind::OffsetIndex => offsets.push(&frame.info),
            _ => times.push(&frame.info),
        };
        match r {
            Ok(_) => ControlFlow::Continue(()),
            Err(e) => {
                failed = Some(format!("{e:?}"));
                ControlFlow::Break(())
            }
        }
    })?;
    if let Some(reason) = failed {
        return Err(TailError::BadState {
            path: path.to_path_buf(),
            reason: format!("rebuilding the {kind:?}: {reason}"),
        });
    }
    Ok(match kind {
        CompanionKind::OffsetIndex => offsets.to_bytes(),
        _ => {
            times.seal();
            times.to_bytes()
        }
    })
}
