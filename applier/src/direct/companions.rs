//! The active segment's companions on a tailed mirror: its `.txnindex`, offset index and time index, kept right
//! as chunks are appended, so `verify --strict` on a stopped mirror finds the active segment as sound as the
//! sealed ones (whose companions the seal ships from the broker).
//!
//! # `.txnindex`: kept durable, in step with the position
//! An ABORT marker's entry needs the first offset of that producer's open transaction, which may lie segments
//! earlier. The transactions open at the recorded position (producer id → first offset) are therefore part of
//! the partition's state file, written atomically with the position at each chunk, and fed to a
//! [`TxnTracker`] (the rule `verify` checks the index against, as the broker's `ProducerStateManager` follows
//! it) for the next chunk. A chunk's entries are computed before anything is written and appended to the
//! `.txnindex` *after* the `.log` is durable and *before* the record, with an fsync of their own: only a chunk
//! holding an ABORT marker of a transaction with data pays it, so the per-chunk latency path is unchanged.
//! A crash can only leave entries beyond the record (never fewer than it claims): a session start drops the
//! entries at or above the recorded next offset, and a torn last entry. A state file written before this was
//! recorded (or one the hand-over derived from the catalog) has no open set: it is derived by scanning the
//! partition's segments from the first (as `promote` does for a tailed segment; a transaction open across the
//! first segment's base is taken to start at its first batch in the mirror, as `verify` takes it), and the
//! active segment's `.txnindex` is rewritten from that scan.
//!
//! # Sealing without a second read
//! The kept indexes also carry the running SHA-256 of the bytes appended (each chunk's, after its batches were
//! checked and pushed), so a seal of a segment this process appended from byte 0 compares that digest with the
//! seal's and takes the indexes as they are (the time index with a roll's final entry), instead of reading the
//! segment again (a digest pass and a scan per index: three passes over a 1 GiB segment, on the session's one
//! applying thread). Only this process writes the mirror's file, so the bytes it appended are the file's; the size
//! is still checked on disk. After a start (no running state: the indexes are rebuilt from the file) or a failed
//! attempt, the seal reads the file as before. So does every seal with `SEGMIRROR_SEAL_FULL_READ=1` in the
//! environment (the shipper reads it too: the file checked at every seal, and the A/B of the benchmarks).
//!
//! # Offset and time index: maintained without fsync, rebuilt at start
//! They are derived from the `.log` alone, so they are kept in memory ([`OffsetIndexBuilder`],
//! [`TimeIndexBuilder`], the broker's own entry rule at [`REBUILD_INDEX_INTERVAL_BYTES`]) and each chunk's new
//! entries are appended to the files *without* an fsync: the per-chunk latency stays one `.log` fsync plus the
//! state file. A crash may leave them stale or torn; the first session start of the next process rebuilds both
//! from the `.log` up to the recorded position before anything reads them (so does any chunk that finds the
//! in-memory copy missing or behind, e.g. after a failed attempt). `verify` is therefore sound on a mirror after
//! a clean stop, and after a crash once the applier ran again. A seal replaces them with the broker's own.
//!
//! # What the record says of them
//! Each record also carries the three files' entry counts and CRC-32C as written ([`KeptFiles`], `kept`), so that
//! `promote` can tell, without the `.log`, whether the files on disk are the ones written for the recorded position
//! (an index write a crash lost does not match, and is rebuilt there). So does the segment's closed log (every
//! transaction a marker closed, `kept`), written beside the indexes, the same way.

use std::collections::HashMap;

use segment_format::batch::BatchInfo;
use segment_format::dir::PartitionDir;
use segment_format::index::{serialize_offset_index, serialize_time_index};
use segment_format::txn_ends::{TxnEnds, TxnEndsBuilder};
use segment_format::txn_index::{self, AbortedTxn, ClosedTransaction, OpenTransaction, TxnIndex, TxnTracker};

use segment_format::closed_log::{self, CLOSED_ENTRY_SIZE};

use super::kept::{recorded_closed_log, KeptFiles};
use super::*;
use segment_format::file_record::FileRecord;

/// Open transactions per partition beyond which their tallies are not kept: a state file stays a few KiB, and is
/// rewritten at every chunk (promotion reads at most 64 KiB of it).
pub(super) const MAX_TALLIED_OPEN: usize = 128;

pub(super) fn tracker_of(open: &[OpenTransaction]) -> TxnTracker {
    TxnTracker::with_tallied(open.iter().copied())
}

/// The tracker's open transactions, in order of first offset (their tallies when at most [`MAX_TALLIED_OPEN`] are
/// open: dropped once, a tally is not kept again for that transaction).
pub(super) fn open_of(tracker: &TxnTracker) -> Vec<OpenTransaction> {
    let tallied = tracker.open_tallied().count() <= MAX_TALLIED_OPEN;
    tracker
        .open_tallied()
        .map(|o| OpenTransaction {
            tally: o.tally.filter(|_| tallied),
            ..o
        })
        .collect()
}

/// The offset and time index of an unsealed segment, in memory, and how much of each is in its file.
pub(super) struct ActiveIndexes {
    base: i64,
    /// The `.log` bytes the builders have seen (the recorded position once the chunk is recorded).
    position: u64,
    offsets: OffsetIndexBuilder,
    times: TimeIndexBuilder,
    /// Entries already in the files; `None`: the files are (re)written whole at the next write.
    written: Option<(usize, usize)>,
    /// The SHA-256 of the `.log` bytes `[0, position)`, when this process appended every one of them; `None`
    /// after a rebuild from the file (a start, a failed attempt): the seal then reads the file (see "Sealing
    /// without a second read" in the module doc).
    sha: Option<aws_lc_rs::digest::Context>,
    /// What the three companion files hold as written (entry counts and CRC-32C), recorded with the position
    /// (`kept`).
    pub files: KeptFiles,
    /// How the batches `[0, position)` leave each transactional producer, recorded with the segment at its seal
    /// (`segment_format::txn_ends`, as an install records it); `None` when this process did not see them all.
    txn_ends: Option<TxnEndsBuilder>,
    /// The closed log holds what `files.closed_log` describes; `false`: it is written whole (started over) at the
    /// next write.
    closed_log_written: bool,
}

/// What a seal takes from the indexes kept while the segment was active, when they cover all of it.
pub(super) struct Sealing {
    /// SHA-256 of the whole segment as appended.
    pub sha256: [u8; 32],
    /// The offset index a rebuild at [`REBUILD_INDEX_INTERVAL_BYTES`] gives.
    pub offsets: Vec<u8>,
    /// The time index a rebuild at that interval gives, with the final entry of a roll.
    pub times: Vec<u8>,
    /// How the segment's batches leave each transactional producer (`None`: more than `txn_ends::MAX_PRODUCERS`).
    pub txn_ends: Option<TxnEnds>,
    /// The record of the segment's closed log as written (read for the segment's log, `crate::segment_log`).
    pub closed_log: FileRecord,
}

impl ActiveIndexes {
    fn new(base: i64) -> ActiveIndexes {
        ActiveIndexes {
            base,
            position: 0,
            offsets: OffsetIndexBuilder::new(base, REBUILD_INDEX_INTERVAL_BYTES),
            times: TimeIndexBuilder::new(base, REBUILD_INDEX_INTERVAL_BYTES),
            written: None,
            sha: Some(aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256)),
            files: KeptFiles::default(),
            txn_ends: Some(TxnEndsBuilder::new()),
            closed_log_written: false,
        }
    }

    /// Writes the transactions a chunk's markers closed (`closed`, in offset order) to the closed log at `path`:
    /// appended, or the whole log when it is not written yet (so an earlier segment's entries, or a crash's
    /// leftovers, go). No fsync: promotion uses the log only where its bytes are the recorded ones (`kept`). Past
    /// [`closed_log::MAX_ENTRIES`] entries, no more are written. A chunk without markers writes nothing: where the
    /// log is not written yet it is recorded empty, whatever the file holds, and the first entries start it over (a
    /// partition without transactions never has one).
    fn write_closed_log(&mut self, path: &Path, closed: &[ClosedTransaction]) -> TailResult<()> {
        let whole = !self.closed_log_written;
        let room = closed_log::MAX_ENTRIES.saturating_sub(if whole { 0 } else { self.files.closed_log.entries });
        let closed = &closed[..closed.len().min(usize::try_from(room).unwrap_or(usize::MAX))];
        if closed.is_empty() {
            if whole {
                self.files.closed_log = FileRecord::default();
            }
            return Ok(());
        }
        let bytes = closed_log::serialize(closed);
        // Described before the write: should it fail, the record (which would carry this) is not written.
        self.files.closed_written(whole, &bytes, closed.len());
        let open = || {
            use std::os::unix::fs::OpenOptionsExt as _;
            OpenOptions::new()
                .create(true)
                .append(!whole)
                .write(true)
                .truncate(whole)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
        };
        let mut file = match open() {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(dir) = path.parent() {
                    fs::create_dir_all(dir).map_err(|e| TailError::io(dir, e))?;
                }
                open()
            }
            opened => opened,
        }
        .map_err(|e| TailError::io(path, e))?;
        file.write_all(&bytes).map_err(|e| TailError::io(path, e))?;
        self.closed_log_written = true;
        Ok(())
    }

    /// After a rebuild: the closed log at `path` continues where `recorded` (the record's description, when its facts
    /// describe the rebuilt position) says it stands, cut back to it, when its bytes begin with the recorded ones;
    /// otherwise it starts over at the next write.
    fn resume_closed_log(&mut self, path: &Path, recorded: Option<FileRecord>) -> TailResult<()> {
        let Some(recorded) = recorded.filter(|r| r.entries > 0) else {
            return Ok(());
        };
        if recorded_closed_log(path, recorded)
            .map_err(|e| TailError::io(path, e))?
            .is_some()
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            let len = recorded.entries * CLOSED_ENTRY_SIZE as u64;
            let file = OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
                .map_err(|e| TailError::io(path, e))?;
            file.set_len(len).map_err(|e| TailError::io(path, e))?;
            self.files.closed_log = recorded;
            self.closed_log_written = true;
        }
        Ok(())
    }

    /// The chunk's bytes, which its batches were pushed for, added to the running SHA-256.
    fn hash(&mut self, bytes: &[u8]) {
        if let Some(sha) = &mut self.sha {
            sha.update(bytes);
        }
    }

    fn push(&mut self, batch: &BatchInfo) -> std::result::Result<(), segment_format::ParseError> {
        self.offsets.push(batch)?;
        self.times.push(batch)?;
        if let Some(ends) = &mut self.txn_ends {
            ends.on_batch(batch);
        }
        self.position = batch.position + batch.size;
        Ok(())
    }

    /// Writes what the files lack: the new entries appended, or the whole files when not written yet. No fsync
    /// (module docs).
    fn write(&mut self, pdir: &Path) -> TailResult<()> {
        let (from_o, from_t) = self.written.unwrap_or((0, 0));
        let whole = self.written.is_none();
        let o = &self.offsets.entries()[from_o.min(self.offsets.entries().len())..];
        let t = &self.times.entries()[from_t.min(self.times.entries().len())..];
        for (kind, bytes) in [
            (SegmentFileKind::Index, serialize_offset_index(o)),
            (SegmentFileKind::TimeIndex, serialize_time_index(t)),
        ] {
            if bytes.is_empty() && !whole {
                continue;
            }
            // Described before the write: should it fail, the record (which would carry this) is not written.
            match kind {
                SegmentFileKind::Index => self.files.offsets_written(whole, o),
                _ => self.files.times_written(whole, t),
            }
            let path = pdir.join(segment_file_name(self.base, kind));
            let mut file = OpenOptions::new()
                .create(true)
                .append(!whole)
                .write(true)
                .truncate(whole)
                .open(&path)
                .map_err(|e| TailError::io(&path, e))?;
            file.write_all(&bytes).map_err(|e| TailError::io(&path, e))?;
        }
        self.written = Some((self.offsets.entries().len(), self.times.entries().len()));
        Ok(())
    }
}

/// What one chunk adds to the active segment's companions, computed before anything is written.
pub(super) struct ChunkCompanions {
    /// `.txnindex` entries of the chunk's ABORT markers.
    aborted: Vec<AbortedTxn>,
    /// The transactions open after the chunk (recorded with the new position).
    pub open: Vec<OpenTransaction>,
    /// The transactions the chunk's markers closed, in offset order (`kept`).
    pub closed: Vec<ClosedTransaction>,
    indexes: ActiveIndexes,
}

impl ChunkCompanions {
    /// The segment's companion files as they stand once the chunk's are written (`kept`).
    pub(super) fn files(&self) -> KeptFiles {
        self.indexes.files
    }
}

impl Inner {
    /// The transactions open at the recorded position of `name` (none for a partition without state), derived
    /// and recorded first when the state file does not hold them (module docs).
    pub(super) fn open_transactions(&mut self, name: &str) -> TailResult<Vec<OpenTransaction>> {
        let Some(s) = self.states.get(name).cloned() else {
            return Ok(Vec::new());
        };
        if let Some(open) = &s.open_transactions {
            return Ok(open.clone());
        }
        let pdir = self.partition_dir(&s.topic, s.partition);
        // The directory is created before any state names it; one deleted since holds no transaction.
        let listed = if pdir.exists() {
            PartitionDir::open(&pdir)?.segments
        } else {
            Vec::new()
        };
        let segments: Vec<(i64, PathBuf)> = listed
            .iter()
            .filter(|f| f.base_offset <= s.segment_base)
            .map(|f| (f.base_offset, f.log.clone()))
            .collect();
        let paths: Vec<&Path> = segments.iter().map(|(_, p)| p.as_path()).collect();
        let last_is_active = segments.last().is_some_and(|(b, _)| *b == s.segment_base);
        let (tracker, entries) = txn_index::follow_segments(&paths, Some(s.position), TxnTracker::new())?;
        if !s.sealed && pdir.exists() {
            let entries = if last_is_active { entries } else { Vec::new() };
            write_txn_index(&pdir, s.segment_base, &entries)?;
        }
        // The `.txnindex` may have been rewritten: the in-memory description of it is rebuilt with the indexes.
        self.indexes.remove(name);
        let open = open_of(&tracker);
        tracing::info!(partition = %name, open = open.len(), "open transactions derived from the mirror's segments");
        self.record(
            name.to_string(),
            PartitionState {
                open_transactions: Some(open.clone()),
                ..s
            },
        )?;
        Ok(open)
    }

    /// After a truncation recorded `name` at its new end: its open transactions derived again from the segments and
    /// its active indexes rebuilt there (`.txnindex` entries beyond the cut dropped).
    pub(super) fn open_transactions_at_cut(&mut self, name: &str) -> TailResult<()> {
        self.open_transactions(name)?;
        if let Some(s) = self.states.get(name).cloned() {
            let indexes = self.active_indexes(name, s.segment_base, s.position)?;
            self.indexes.insert(name.to_string(), indexes);
        }
        Ok(())
    }

    /// At the start of a session, after the positions are checked: every partition's open transactions known,
    /// and every unsealed segment's companions made to match its recorded position (module docs).
    pub(super) fn recover_companions(&mut self) -> TailResult<()> {
        let mut names: Vec<String> = self.states.keys().cloned().collect();
        names.sort();
        for name in names {
            let s = self.states[&name].clone();
            if let Some(catalog) = &mut self.catalog {
                let p = PartitionRef {
                    topic: s.topic.clone(),
                    partition: s.partition,
                    topic_id: s.topic_id,
                };
                // A paused or promoted partition is never written to, derived files included (a resumed one gets
                // them at its next chunk).
                match catalog.check_writable(&p, None) {
                    Ok(()) => {}
                    Err(TailError::NotWritable { .. } | TailError::LineageBreak { .. }) => continue,
                    Err(e) => return Err(e),
                }
            }
            self.open_transactions(&name)?;
            let s = self.states[&name].clone();
            if s.sealed {
                continue;
            }
            let indexes = self.active_indexes(&name, s.segment_base, s.position)?;
            self.indexes.insert(name, indexes);
        }
        Ok(())
    }

    /// The in-memory indexes of `name`'s unsealed segment `base` at `position`, taken out of the map (put back
    /// only once a chunk is recorded, so a failed attempt never leaves them ahead of the record); rebuilt from
    /// the `.log`, with its `.txnindex` cut back to the record, when missing or not at that point.
    fn active_indexes(&mut self, name: &str, base: i64, position: u64) -> TailResult<ActiveIndexes> {
        if let Some(ai) = self.indexes.remove(name) {
            if ai.base == base && ai.position == position && ai.written.is_some() {
                return Ok(ai);
            }
        }
        let Some(s) = self.states.get(name).cloned() else {
            let mut ai = ActiveIndexes::new(base);
            if position > 0 {
                ai.sha = None;
                ai.txn_ends = None;
            }
            return Ok(ai);
        };
        let pdir = self.partition_dir(&s.topic, s.partition);
        // Entries a crash (or a failed attempt) left at or beyond the recorded end, and a torn last one.
        let cut = if position == 0 {
            base
        } else {
            s.next_offset.unwrap_or(base)
        };
        let txn_path = pdir.join(segment_file_name(base, SegmentFileKind::TxnIndex));
        let mut ai = ActiveIndexes::new(base);
        match fs::read(&txn_path) {
            Ok(bytes) => {
                let parsed = TxnIndex::parse(&bytes);
                let kept: Vec<AbortedTxn> = parsed.entries.iter().copied().filter(|e| e.last_offset < cut).collect();
                if kept.len() != parsed.entries.len() || parsed.trailing_bytes != 0 {
                    tracing::warn!(path = %txn_path.display(), dropped = parsed.entries.len() - kept.len(),
                        "dropping .txnindex entries beyond the recorded end");
                    write_txn_index(&pdir, base, &kept)?;
                }
                ai.files.txn_is(&kept);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(TailError::io(&txn_path, e)),
        }
        if position > 0 {
            // Rebuilt from the file: no running digest (the seal reads the file).
            ai.sha = None;
            let log_path = self.log_path(&s.topic, s.partition, base);
            let mut log = LogFile::open(&log_path)?;
            let mut failed = None;
            log.scan_range(0, position, |frame| match ai.push(&frame.info) {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    failed = Some(e);
                    ControlFlow::Break(())
                }
            })?;
            if let Some(e) = failed {
                return Err(TailError::Format(e.at(&log_path)));
            }
        }
        ai.position = position;
        if position > 0 {
            // Nothing to index yet otherwise: the files come with the first chunk.
            ai.write(&pdir)?;
            let recorded = s
                .valid_kept()
                .filter(|k| k.segment_base == base && k.position == position)
                .map(|k| k.closed_log);
            ai.resume_closed_log(&mirror::closed_log_file(&self.root, name), recorded)?;
        }
        Ok(ai)
    }

    /// The companions chunk `chunk` (its batches `batches`, checked) adds to `name`'s segment, computed before
    /// anything is written; `new_segment`: the chunk starts a segment, no earlier bytes of it count; `group_open`:
    /// the transactions open after the group's previous chunk of the partition, when there is one (not recorded
    /// yet).
    pub(super) fn chunk_companions(
        &mut self,
        name: &str,
        chunk: &Chunk,
        batches: &[BatchInfo],
        new_segment: bool,
        group_open: Option<Vec<OpenTransaction>>,
    ) -> TailResult<ChunkCompanions> {
        let open = match group_open {
            Some(open) => open,
            None => self.open_transactions(name)?,
        };
        let mut tracker = tracker_of(&open);
        let mut closed = Vec::new();
        let aborted: Vec<AbortedTxn> = batches
            .iter()
            .filter_map(|b| {
                let (aborted, ended) = tracker.on_batch_closing(b);
                closed.extend(ended);
                aborted
            })
            .collect();
        let mut indexes = if new_segment || chunk.position == 0 {
            self.indexes.remove(name);
            ActiveIndexes::new(chunk.segment_base)
        } else {
            self.active_indexes(name, chunk.segment_base, chunk.position)?
        };
        for b in batches {
            indexes.push(b).map_err(|e| TailError::BadBatch {
                partition: name.to_string(),
                segment: chunk.segment_base,
                position: chunk.position,
                at: b.position,
                reason: format!("cannot be indexed in this segment: {e:?}"),
            })?;
        }
        indexes.hash(&chunk.bytes);
        Ok(ChunkCompanions {
            aborted,
            open: open_of(&tracker),
            closed,
            indexes,
        })
    }

    /// Writes the chunk's companions once its bytes are durable and before its record: the `.txnindex` entries
    /// durably (only when there are any), the index entries without an fsync (module docs).
    pub(super) fn write_chunk_companions(
        &mut self,
        pdir: &Path,
        chunk: &Chunk,
        companions: &mut ChunkCompanions,
    ) -> TailResult<()> {
        let base = chunk.segment_base;
        let txn_path = pdir.join(segment_file_name(base, SegmentFileKind::TxnIndex));
        if chunk.position == 0 {
            // Left by an attempt at this segment that was never recorded.
            match fs::remove_file(&txn_path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(TailError::io(&txn_path, e)),
            }
        }
        if !companions.aborted.is_empty() {
            let created = !txn_path.exists();
            let mut file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&txn_path)
                .map_err(|e| TailError::io(&txn_path, e))?;
            file.write_all(&txn_index::serialize(&companions.aborted))
                .map_err(|e| TailError::io(&txn_path, e))?;
            file.sync_all().map_err(|e| TailError::io(&txn_path, e))?;
            if created {
                fsync_dir(pdir)?;
            }
            companions.indexes.files.txn_appended(&companions.aborted);
        }
        companions.indexes.write(pdir)?;
        let closed_log = mirror::closed_log_file(&self.root, &tp_name(&chunk.partition));
        companions.indexes.write_closed_log(&closed_log, &companions.closed)
    }

    /// After the chunk is recorded: its indexes are the partition's current ones.
    pub(super) fn keep_indexes(&mut self, name: String, companions: ChunkCompanions) {
        self.indexes.insert(name, companions.indexes);
    }

    /// `name`'s closed log, recorded empty, starts over at the next write.
    pub(super) fn restart_closed_log(&mut self, name: &str) {
        if let Some(ai) = self.indexes.get_mut(name) {
            ai.files.closed_log = FileRecord::default();
            ai.closed_log_written = false;
        }
    }

    /// A seal (or anything else that ends the segment) makes the in-memory indexes stale.
    pub(super) fn forget_indexes(&mut self, name: &str) {
        self.indexes.remove(name);
    }

    /// For the seal of `name`'s segment `base`, recorded durable up to `position`: its running digest and indexes
    /// when they cover exactly those bytes and the file holds no more (`None`: the seal reads the file). The
    /// in-memory indexes are gone either way (as [`Inner::forget_indexes`]).
    pub(super) fn sealing(&mut self, name: &str, base: i64, position: u64, path: &Path) -> TailResult<Option<Sealing>> {
        let Some(ai) = self.indexes.remove(name) else {
            return Ok(None);
        };
        let Some(sha) = ai
            .sha
            .filter(|_| ai.base == base && ai.position == position && !full_read_forced())
        else {
            return Ok(None);
        };
        let len = fs::metadata(path).map_err(|e| TailError::io(path, e))?.len();
        if len != position {
            return Ok(None);
        }
        let mut sha256 = [0u8; 32];
        sha256.copy_from_slice(sha.finish().as_ref());
        let Some(txn_ends) = ai.txn_ends else {
            return Ok(None);
        };
        let mut times = ai.times;
        times.seal();
        Ok(Some(Sealing {
            sha256,
            offsets: ai.offsets.to_bytes(),
            times: times.to_bytes(),
            txn_ends: txn_ends.finish(),
            closed_log: ai.files.closed_log,
        }))
    }
}

/// Writes segment `base`'s `.txnindex` holding `entries` (removed when there are none: Kafka creates it lazily).
fn write_txn_index(pdir: &Path, base: i64, entries: &[AbortedTxn]) -> TailResult<()> {
    let path = pdir.join(segment_file_name(base, SegmentFileKind::TxnIndex));
    if entries.is_empty() {
        return match fs::remove_file(&path) {
            Ok(()) => fsync_dir(pdir).map_err(TailError::from),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(TailError::io(&path, e)),
        };
    }
    write_atomically(&path, &txn_index::serialize(entries))?;
    Ok(())
}

/// The in-memory indexes of every partition's unsealed segment.
pub(super) type IndexMap = HashMap<String, ActiveIndexes>;

/// `SEGMIRROR_SEAL_FULL_READ=1`: every seal reads the file (module docs); read once per process.
fn full_read_forced() -> bool {
    static FORCED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| std::env::var_os("SEGMIRROR_SEAL_FULL_READ").is_some_and(|v| v == "1"))
}
