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
use segmirror_transport::digest::{digest_file, digest_of};
use segmirror_transport::direct::error::{DirectError, Result as DirectResult};
use segmirror_transport::direct::payload::{
    Chunk, Claim, Companion, CompanionKind, LayoutSegment, LogEnd, LogStart, PartitionRef, Position, Roll,
    SegmentReplace, SegmentSeal, SourceProgress, TopicId, Truncate, TruncateMode,
};
use segmirror_transport::direct::session::{ChunkApplier, ClaimDecision, DurablePosition};
use serde::{Deserialize, Serialize};

use crate::mirror;

mod active;
mod append;
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
mod error;
mod handover;
#[cfg(test)]
mod handover_tests;
mod kept;
mod kept_verify;
mod lag;
mod lineage;
#[cfg(test)]
mod peer_fault_tests;
mod progress;
mod replace;
mod retention;
mod seal;
#[cfg(test)]
mod session_tests;
#[cfg(test)]
mod tests;
mod truncate;
#[cfg(test)]
mod truncate_tests;

pub use active::{recorded_active_segment, ActiveSegment};
pub use catalog::{TailCatalog, TAIL_MANIFEST_KEY_PREFIX, TAIL_STORE_URL};
pub use claims::{claim_path, ROLL_INDEX_INTERVAL_BYTES};
pub use error::TailError;
use error::TailResult;
pub use kept::{open_transactions_match_a_walk, recorded_closed_log, Kept, KeptEpochs, MAX_KEPT_EPOCHS};
pub use kept_verify::verify_kept;
pub use lag::{tail_lags, TailLag};
pub use progress::{progress_path, MAX_PROGRESS_POINTS};
// Read by others through `crate::mirror`, which owns the readers; named here too for the applier's own callers.
pub use crate::mirror::{recorded_claim, recorded_progress, ClaimRecord, RecordedProgress, RecordedShipped};
pub use replace::ReplaceSeal;
pub use retention::{tailed_log_start, DEFAULT_RETAIN_DELETED_FOR};
#[cfg(test)]
pub(crate) use seal::rebuild_index;
pub(crate) use seal::{rebuild_index_with, rebuild_interval};
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
    /// (`companions`), each with its tally (producer epoch, records, batches, bytes up to `position`) when known:
    /// what promotion's ABORT marker needs without a walk. `None` in a state file written before they were
    /// recorded, or derived by the hand-over: then derived from the segments at the next session start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    open_transactions: Option<Vec<segment_format::txn_index::OpenTransaction>>,
    /// What promotion needs of the partition without reading its data, describing this record's position
    /// (`kept`); `None` in a state file written before they were kept, or by a step that does not keep them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kept: Option<kept::Kept>,
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
        upto: TruncateMode,
    ) -> impl std::future::Future<Output = DirectResult<()>> + Send {
        let report = report.clone();
        self.run("recording the source's progress", move |i| {
            // Advisory (see `progress`): a failure is logged, never the session's.
            let installed_end = i.states.get(&tp_name(&report.partition)).and_then(|s| s.next_offset);
            if let Err(reason) = progress::record(&i.root, &report, installed_end, upto) {
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
        meta: segmirror_transport::bucket::link_meta::LinkMeta,
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
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    digest_of(bytes).sha256.0
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
