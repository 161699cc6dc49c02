//! Source truncation (feature bit 5, frame 14 Truncate): the mirror follows a source that dropped records it had
//! shipped, as a Kafka follower truncates to its leader, and never loses them: what it removes goes to an archive
//! beside the mirror first.
//!
//! # What the applier checks (it trusts only its own bytes)
//! The shipper decides *that* the logs diverged (it compares the mirror's end and last epoch, which this side read
//! off its batches for the Resume, with the source's leader-epoch checkpoint). The appender accepts the cut only
//! when its bytes agree with the evidence: the partition's active segment holds a batch starting at exactly
//! `position` with base offset `truncate_to`; its last batch ends at the `mirror_end_offset` in the `mirror_epoch`
//! the Truncate repeats; `truncate_to` is not above the source's end offset for that epoch; every batch kept is of
//! an epoch the source's answer covers; the cut is above the mirror's first offset (something remains). Installed
//! versions the cut reaches must be segments the tail itself sealed (never what `apply` installed from the bucket).
//! Anything else is refused naming partition and offsets, with nothing changed.
//!
//! # A cut into a sealed segment
//! An unclean election can truncate the source below its last roll: Kafka's `truncateTo` then deletes every
//! segment above the one holding the cut and makes that one active again. The mirror shares the source's layout
//! below the divergence, so it does the same: the segments above the cut one are removed whole (their bytes follow
//! the cut segment's in the archive, so the archive stays one run of valid batches in offset order), the cut
//! segment's sealed companions are dropped (its offset and time index are rebuilt as an active segment's, its
//! `.txnindex` derived again), producer snapshots above the cut go (as Kafka deletes them), and the catalog's
//! installed rows from the cut segment on are dropped with the installed end set back to its base
//! ([`segmirror_catalog::Catalog::truncate_installed`]): the catalog again holds the sealed history below the
//! active segment, the state file the active segment. The shipper continues there and seals the segment again
//! when the source rolls.
//!
//! # The crash protocol
//! 1. a journal `<mirror>/.tail/truncations/<topic>-<partition>.json` (atomic) names the cut, the segments removed
//!    whole, and the archive;
//! 2. the archive `<mirror>/.archive/<topic>-<partition>/<from:020>-<to:020>.log`: the removed bytes, raw valid
//!    Kafka batches, streamed with their SHA-256 into a temporary file, fsynced, renamed, directory fsynced; then
//!    its JSON sidecar (offsets, epochs, size, SHA-256, time, reason);
//! 3. the segments above the cut one deleted (highest first), producer snapshots above the cut and the cut
//!    segment's offset and time index deleted, the mirror's `.log` cut to `position`, fsynced, directory fsynced;
//! 4. the catalog: installed rows from the cut segment dropped (only when the cut reached them), the truncation
//!    row (`truncations`); both idempotent;
//! 5. the state file at the new end, unsealed (its open transactions derived again, the active indexes rebuilt);
//! 6. the journal removed.
//!
//! A crash anywhere leaves the journal; the next session start ([`Inner::recover_truncations`], before the
//! positions are read) repeats every step from 2 (each is idempotent: an archive already in place is checked by
//! size, files already deleted or cut are left alone). The state file is written last among the changes, so until
//! then the recorded position still claims the removed bytes, and the journal is what explains a file shorter
//! than it (or gone).
//!
//! The archive lives outside every partition directory (a broker handed the directory at promotion never sees it,
//! and `promote` reads only partition directories and the state files).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::durable::{fsync_dir, write_atomically};
use segment_format::log::LogFile;
use segmirror_catalog::{TruncationKind, TruncationRecord};
use segmirror_transport::digest::digest_file;
use segmirror_transport::direct::payload::{LogEnd, PartitionRef, Position, Truncate, TruncateMode};
use segmirror_transport::direct::session::DurablePosition;
use serde::{Deserialize, Serialize};

use super::{hex, tp_name, Inner, PartitionState, TailError, TailResult};
use crate::mirror;

/// Bytes copied at once into the archive (1 MiB): bounded memory whatever the range.
const ARCHIVE_COPY_BYTES: usize = 1024 * 1024;

/// The journal of one truncation, and (with its digest) the archive's sidecar.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedRange {
    pub topic: String,
    pub partition: i32,
    #[serde(with = "hex_id")]
    pub topic_id: [u8; 16],
    /// The mirror segment cut, and the byte position it is cut to (the start of the first batch removed).
    pub segment_base: i64,
    pub position: u64,
    /// The segment's size before: the archive holds `[position, end_position)` of it.
    pub end_position: u64,
    /// First offset removed and one past the last: `[from_offset, to_offset)`.
    pub from_offset: i64,
    pub to_offset: i64,
    pub batches: u64,
    /// Leader epochs of the first and last batch removed.
    pub first_epoch: i32,
    pub last_epoch: i32,
    /// The shipper's evidence.
    pub mirror_epoch: i32,
    pub source_epoch: i32,
    pub source_end_offset: i64,
    /// The archive file, relative to the mirror root.
    pub archive: String,
    pub at_ms: i64,
    pub reason: String,
    /// Hex SHA-256 of the archive (the sidecar only; the journal is written before it is known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Segments above the cut one, removed whole (the cut reached into sealed history), in offset order; their
    /// bytes follow the cut segment's in the archive.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed_segments: Vec<RemovedSegment>,
    /// The catalog's installed rows from this base on are dropped (the cut reached installed versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uninstall_from: Option<i64>,
}

/// A segment a truncation removes whole: its base and the bytes of it archived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovedSegment {
    pub base: i64,
    pub size: u64,
}

impl ArchivedRange {
    /// Bytes the archive holds: the cut segment's tail, then every segment removed whole.
    pub fn archived_size(&self) -> u64 {
        (self.end_position - self.position) + self.removed_segments.iter().map(|r| r.size).sum::<u64>()
    }
}

mod hex_id {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(id: &[u8; 16], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::hex(id))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 16], D::Error> {
        let text = String::deserialize(d)?;
        let mut out = [0u8; 16];
        if text.len() != 32 {
            return Err(serde::de::Error::custom(format!(
                "topic id {text:?}: 32 hex digits expected"
            )));
        }
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = text
                .get(2 * i..2 * i + 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| serde::de::Error::custom(format!("topic id {text:?}: not hex")))?;
        }
        Ok(out)
    }
}

/// The archive file of a range (relative to the mirror root): [`mirror::archive_range_file`].
pub fn archive_path(topic: &str, partition: i32, from: i64, to: i64) -> String {
    mirror::archive_range_file(topic, partition, from, to)
}

/// What a scan of the active segment found around the cut.
struct Scan {
    /// The batch starting at the cut: its base offset (`None`: no batch starts there).
    at_cut: Option<i64>,
    /// Epoch of the last v2 batch before the cut (`-1`: none).
    kept_epoch: i32,
    first_epoch: i32,
    last_epoch: i32,
    batches: u64,
    /// One past the last offset of the segment's last batch, and that batch's epoch.
    end: Option<(i64, i32)>,
    /// The stored CRC of the segment's last batch.
    end_crc: Option<u32>,
}

fn scan(path: &Path, cut: u64, end: u64) -> TailResult<Scan> {
    let mut log = LogFile::open(path)?;
    let mut s = Scan {
        at_cut: None,
        kept_epoch: -1,
        first_epoch: -1,
        last_epoch: -1,
        batches: 0,
        end: None,
        end_crc: None,
    };
    log.scan_range(0, end, |frame| {
        let info = &frame.info;
        if info.position < cut {
            if info.magic >= 2 {
                s.kept_epoch = info.partition_leader_epoch;
            }
        } else {
            if info.position == cut {
                s.at_cut = Some(info.base_offset);
                s.first_epoch = info.partition_leader_epoch;
            }
            s.batches += 1;
            s.last_epoch = info.partition_leader_epoch;
        }
        s.end = Some((info.last_offset + 1, info.partition_leader_epoch));
        s.end_crc = Some(frame.stored_crc);
        ControlFlow::Continue(())
    })?;
    Ok(s)
}

/// The mirror's end for a Resume: the last batch at or before the durable position (the previous segment's last
/// batch when the position is a segment's byte 0), read off the files.
pub(super) fn log_end(pdir: &Path, d: &DurablePosition) -> TailResult<LogEnd> {
    last_batch(pdir, d).map(|(end, _)| end)
}

/// [`log_end`] and the stored CRC of that last batch (`None`: no batch at or before the position), for a claim's
/// grant (feature bit 6: the new holder proves its replica holds the same batch there).
pub(super) fn last_batch(pdir: &Path, d: &DurablePosition) -> TailResult<(LogEnd, Option<u32>)> {
    let base = d.position.segment_base;
    let listed = if pdir.exists() {
        segment_format::dir::PartitionDir::open(pdir)?.segments
    } else {
        Vec::new()
    };
    let (path, to) = if d.position.position > 0 {
        let path = pdir.join(segment_format::dir::segment_file_name(
            base,
            segment_format::dir::SegmentFileKind::Log,
        ));
        (path, d.position.position)
    } else {
        match listed.iter().rev().find(|f| f.base_offset < base) {
            Some(prev) => {
                let len = fs::metadata(&prev.log).map_err(|e| TailError::io(&prev.log, e))?.len();
                (prev.log.clone(), len)
            }
            None => {
                return Ok((
                    LogEnd {
                        end_offset: base,
                        last_epoch: -1,
                    },
                    None,
                ))
            }
        }
    };
    let s = scan(&path, u64::MAX, to)?;
    Ok(match s.end {
        Some((end_offset, epoch)) => (
            LogEnd {
                end_offset,
                last_epoch: epoch.max(-1),
            },
            s.end_crc,
        ),
        None => (
            LogEnd {
                end_offset: base,
                last_epoch: -1,
            },
            None,
        ),
    })
}

impl Inner {
    fn truncation_journal(&self, name: &str) -> PathBuf {
        mirror::truncation_journal_file(&self.root, name)
    }

    /// Applies a Truncate (module docs): `Some(new end)` once the cut is durable and recorded, `None` in
    /// high-watermark mode (recorded, nothing removed).
    pub(super) fn apply_truncate(&mut self, t: &Truncate) -> TailResult<Option<Position>> {
        let name = tp_name(&t.partition);
        let refuse = |reason: String| TailError::Truncate {
            partition: name.clone(),
            truncate_to: t.truncate_to,
            segment: t.segment_base,
            position: t.position,
            reason,
        };
        let Some(s) = self.states.get(&name).cloned() else {
            return Err(refuse("the mirror holds nothing of the partition".into()));
        };
        if s.topic_id != t.partition.topic_id {
            return Err(refuse(format!(
                "the mirror follows topic id {}, the Truncate names {}",
                hex(&s.topic_id),
                hex(&t.partition.topic_id)
            )));
        }
        if let Some(catalog) = &mut self.catalog {
            catalog.check_writable(&t.partition, None)?;
        }
        if t.mode == TruncateMode::HighWatermark {
            return self.record_divergence(t, &s).map(|()| None);
        }
        if t.segment_base > s.segment_base {
            return Err(refuse(format!(
                "the cut lies in segment {}, above the segment {} the mirror appends to",
                t.segment_base, s.segment_base
            )));
        }
        let pdir = self.partition_dir(&s.topic, s.partition);
        let listed = segment_format::dir::PartitionDir::open(&pdir)?.segments;
        if let Some(f) = listed.iter().find(|f| f.base_offset > s.segment_base) {
            return Err(refuse(format!(
                "the mirror holds segment {} above the segment {} it appends to",
                f.base_offset, s.segment_base
            )));
        }
        // The bytes of a mirror segment that count: the recorded position of the one appended to (or sealed last),
        // the whole file of a sealed one before it.
        let durable_len = |base: i64, path: &Path| -> TailResult<u64> {
            if base == s.segment_base {
                Ok(s.position)
            } else {
                fs::metadata(path).map(|m| m.len()).map_err(|e| TailError::io(path, e))
            }
        };
        if t.segment_base < s.segment_base && !listed.iter().any(|f| f.base_offset == t.segment_base) {
            return Err(refuse(format!("the mirror holds no segment {}", t.segment_base)));
        }
        let path = self.log_path(&s.topic, s.partition, t.segment_base);
        let cut_len = durable_len(t.segment_base, &path)?;
        if t.position >= cut_len {
            return Err(refuse(format!(
                "the mirror's segment {} ends at byte {cut_len}: nothing to truncate",
                t.segment_base
            )));
        }
        let found = scan(&path, t.position, cut_len)?;
        let boundary = if t.position == 0 {
            Some(t.segment_base)
        } else {
            found.at_cut
        };
        if boundary != Some(t.truncate_to) {
            return Err(refuse(match found.at_cut {
                Some(base) => format!("the batch at byte {} starts at offset {base}", t.position),
                None => format!("byte {} is not a batch boundary of {}", t.position, path.display()),
            }));
        }
        // The segments above the cut one go whole (a cut below the last roll, module docs).
        let mut removed_segments = Vec::new();
        let (mut batches, mut last_epoch) = (found.batches, found.last_epoch);
        for f in listed.iter().filter(|f| f.base_offset > t.segment_base) {
            let size = durable_len(f.base_offset, &f.log)?;
            if size > 0 {
                let more = scan(&f.log, 0, size)?;
                batches += more.batches;
                last_epoch = more.last_epoch;
            }
            removed_segments.push(RemovedSegment {
                base: f.base_offset,
                size,
            });
        }
        // The mirror's end, read off its bytes as for the Resume.
        let durable = DurablePosition {
            position: position_of(&t.partition, s.segment_base, s.position),
            sealed: s.sealed,
        };
        let end = log_end(&pdir, &durable)?;
        let end_offset = end.end_offset;
        let log_start = listed.first().map_or(s.segment_base, |f| f.base_offset);
        check_evidence(t, &end, &found, log_start).map_err(refuse)?;
        let uninstall_from = self.uninstall_from(t, refuse)?;
        let range = ArchivedRange {
            topic: s.topic.clone(),
            partition: s.partition,
            topic_id: s.topic_id,
            segment_base: t.segment_base,
            position: t.position,
            end_position: cut_len,
            from_offset: t.truncate_to,
            to_offset: end_offset,
            batches,
            first_epoch: found.first_epoch,
            last_epoch,
            mirror_epoch: t.mirror_epoch,
            source_epoch: t.source_epoch,
            source_end_offset: t.source_end_offset,
            archive: archive_path(&s.topic, s.partition, t.truncate_to, end_offset),
            at_ms: segment_format::now_ms(),
            reason: format!(
                "the source's epoch {} ends at offset {}, below the mirror's end {end_offset} (epoch {})",
                t.source_epoch, t.source_end_offset, t.mirror_epoch
            ),
            sha256: None,
            removed_segments,
            uninstall_from,
        };
        tracing::warn!(partition = %name, from = range.from_offset, to = range.to_offset, archive = %range.archive,
            "the source truncated what the mirror holds: archiving and truncating");
        self.write_truncation_journal(&name, &range)?;
        self.kill_point(crate::direct::TruncateStep::Journaled)?;
        self.finish_truncation(&name, range)
            .map(|(base, position)| Some(position_of(&t.partition, base, position)))
    }

    /// Installed versions the cut reaches: only segments the tail sealed itself, from the cut segment on (their
    /// rows are dropped from `uninstall_from`); a whole version installed from the bucket refuses the cut.
    fn uninstall_from(&mut self, t: &Truncate, refuse: impl Fn(String) -> TailError) -> TailResult<Option<i64>> {
        let mut uninstall_from = None;
        if let Some(catalog) = &mut self.catalog {
            for row in catalog.installed_segments(&t.partition)? {
                let v = &row.version;
                if v.next_offset <= t.truncate_to {
                    continue;
                }
                let tail_sealed = v.sealed
                    && v.base_offset >= t.segment_base
                    && v.manifest_key.starts_with(super::TAIL_MANIFEST_KEY_PREFIX);
                if !tail_sealed {
                    return Err(refuse(format!(
                        "the catalog holds the partition installed as whole versions up to offset {} (segment {} from {})",
                        v.next_offset, v.base_offset, v.manifest_key
                    )));
                }
                uninstall_from = Some(t.segment_base);
            }
        }
        Ok(uninstall_from)
    }

    /// Step 1 of the module docs: the journal of the cut, written atomically.
    fn write_truncation_journal(&self, name: &str, range: &ArchivedRange) -> TailResult<()> {
        let jpath = self.truncation_journal(name);
        if let Some(dir) = jpath.parent() {
            fs::create_dir_all(dir).map_err(|e| TailError::io(dir, e))?;
        }
        let bytes = serde_json::to_vec_pretty(range).map_err(|e| TailError::BadState {
            path: jpath.clone(),
            reason: e.to_string(),
        })?;
        write_atomically(&jpath, &bytes)?;
        Ok(())
    }

    /// Steps 2 to 6 of the module docs, from the journal's range; each idempotent.
    fn finish_truncation(&mut self, name: &str, range: ArchivedRange) -> TailResult<(i64, u64)> {
        let log = self.log_path(&range.topic, range.partition, range.segment_base);
        let pdir = self.partition_dir(&range.topic, range.partition);
        let archive = self.root.join(&range.archive);
        let sha = match fs::metadata(&archive) {
            Ok(m) if m.len() == range.archived_size() => sha256_file(&archive)?,
            Ok(m) => {
                return Err(TailError::BadState {
                    path: archive,
                    reason: format!(
                        "the archive holds {} bytes, the journal names {}",
                        m.len(),
                        range.archived_size()
                    ),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut pieces = vec![(log.clone(), range.position, range.end_position)];
                for r in &range.removed_segments {
                    pieces.push((self.log_path(&range.topic, range.partition, r.base), 0, r.size));
                }
                write_archive(&pieces, &archive)?
            }
            Err(e) => return Err(TailError::io(&archive, e)),
        };
        let sidecar = archive.with_extension("json");
        let described = ArchivedRange {
            sha256: Some(hex(&sha)),
            ..range.clone()
        };
        let bytes = serde_json::to_vec_pretty(&described).map_err(|e| TailError::BadState {
            path: sidecar.clone(),
            reason: e.to_string(),
        })?;
        write_atomically(&sidecar, &bytes)?;
        self.kill_point(crate::direct::TruncateStep::Archived)?;

        // The segments above the cut one, highest first (a crash leaves a prefix of the log), then what is derived
        // from the removed offsets: producer snapshots above the cut, the cut segment's offset and time index
        // (rebuilt below as an active segment's; a sealed one's covered its whole length).
        for r in range.removed_segments.iter().rev() {
            for kind in SegmentFileKind::ALL {
                remove_if_present(&pdir.join(segment_file_name(r.base, kind)))?;
            }
        }
        remove_snapshots_above(&pdir, range.from_offset)?;
        for kind in [SegmentFileKind::Index, SegmentFileKind::TimeIndex] {
            remove_if_present(&pdir.join(segment_file_name(range.segment_base, kind)))?;
        }
        let len = fs::metadata(&log).map_err(|e| TailError::io(&log, e))?.len();
        if len > range.position {
            let file = OpenOptions::new()
                .write(true)
                .open(&log)
                .map_err(|e| TailError::io(&log, e))?;
            file.set_len(range.position).map_err(|e| TailError::io(&log, e))?;
            file.sync_all().map_err(|e| TailError::io(&log, e))?;
        }
        fsync_dir(&pdir)?;
        self.kill_point(crate::direct::TruncateStep::Cut)?;

        if let Some(catalog) = &mut self.catalog {
            if let Some(base) = range.uninstall_from {
                let p = PartitionRef {
                    topic: range.topic.clone(),
                    partition: range.partition,
                    topic_id: range.topic_id,
                };
                catalog.truncate_installed(&p, base)?;
            }
            catalog.record_truncation(&TruncationRecord {
                link: catalog.link().to_string(),
                topic: range.topic.clone(),
                partition: range.partition,
                kind: TruncationKind::Truncated,
                from_offset: range.from_offset,
                to_offset: range.to_offset,
                mirror_epoch: range.mirror_epoch,
                source_epoch: range.source_epoch,
                source_end_offset: range.source_end_offset,
                archive_path: Some(range.archive.clone()),
                sha256: Some(sha),
                size: Some(range.archived_size()),
                at_ms: range.at_ms,
            })?;
        }
        self.kill_point(crate::direct::TruncateStep::Recorded)?;

        let state = PartitionState {
            topic: range.topic.clone(),
            partition: range.partition,
            topic_id: range.topic_id,
            segment_base: range.segment_base,
            position: range.position,
            sealed: false,
            next_offset: Some(range.from_offset),
            open_transactions: None,
            // Recorded again by the next chunk (`kept`).
            kept: None,
        };
        self.forget_indexes(name);
        self.record(name.to_string(), state)?;
        // The companions follow the cut: open transactions derived again, indexes rebuilt, `.txnindex` cut back.
        self.open_transactions_at_cut(name)?;
        let jpath = self.truncation_journal(name);
        fs::remove_file(&jpath).map_err(|e| TailError::io(&jpath, e))?;
        if let Some(dir) = jpath.parent() {
            fsync_dir(dir)?;
        }
        tracing::warn!(partition = %name, from = range.from_offset, to = range.to_offset, archive = %range.archive,
            batches = range.batches, "mirror truncated; the removed batches are in the archive");
        Ok((range.segment_base, range.position))
    }

    /// High-watermark mode: the source lost committed records. Recorded (catalog and log), nothing removed.
    fn record_divergence(&mut self, t: &Truncate, s: &PartitionState) -> TailResult<()> {
        tracing::error!(partition = %tp_name(&t.partition), from = t.truncate_to, to = t.mirror_end_offset,
            mirror_epoch = t.mirror_epoch, source_epoch = t.source_epoch, source_end_offset = t.source_end_offset,
            "the source lost committed records the mirror holds; the partition stops (nothing truncated)");
        if t.truncate_to >= t.mirror_end_offset {
            return Err(TailError::Truncate {
                partition: tp_name(&t.partition),
                truncate_to: t.truncate_to,
                segment: t.segment_base,
                position: t.position,
                reason: format!("not below the mirror's end {}", t.mirror_end_offset),
            });
        }
        if let Some(catalog) = &mut self.catalog {
            catalog.record_truncation(&TruncationRecord {
                link: catalog.link().to_string(),
                topic: s.topic.clone(),
                partition: s.partition,
                kind: TruncationKind::Diverged,
                from_offset: t.truncate_to,
                to_offset: t.mirror_end_offset,
                mirror_epoch: t.mirror_epoch,
                source_epoch: t.source_epoch,
                source_end_offset: t.source_end_offset,
                archive_path: None,
                sha256: None,
                size: None,
                at_ms: segment_format::now_ms(),
            })?;
        }
        Ok(())
    }

    /// Truncations a crash interrupted: finished from their journals (module docs). At session start, before the
    /// recorded positions are checked against the files.
    pub(super) fn recover_truncations(&mut self) -> TailResult<()> {
        let dir = mirror::truncation_journal_dir(&self.root);
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(TailError::io(&dir, e)),
        };
        let mut journals = Vec::new();
        for entry in entries {
            let path = entry.map_err(|e| TailError::io(&dir, e))?.path();
            if mirror::is_record(&path) {
                journals.push(path);
            }
        }
        journals.sort();
        for path in journals {
            let bytes = fs::read(&path).map_err(|e| TailError::io(&path, e))?;
            let range: ArchivedRange = serde_json::from_slice(&bytes).map_err(|e| TailError::BadState {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            let name = format!("{}-{}", range.topic, range.partition);
            if path.file_stem().and_then(|s| s.to_str()) != Some(name.as_str())
                || range.archive != archive_path(&range.topic, range.partition, range.from_offset, range.to_offset)
                || range.position >= range.end_position
                || range
                    .removed_segments
                    .iter()
                    .scan(range.segment_base, |prev, r| {
                        let ordered = r.base > *prev;
                        *prev = r.base;
                        Some(ordered)
                    })
                    .any(|ordered| !ordered)
            {
                return Err(TailError::BadState {
                    path,
                    reason: format!("a truncation journal that does not describe {name}'s cut"),
                });
            }
            tracing::warn!(journal = %path.display(), "finishing a truncation a crash interrupted");
            self.finish_truncation(&name, range)?;
        }
        Ok(())
    }

    /// The mirror's end per durable position, for the Resume (feature bit 5).
    pub(super) fn log_ends(&self, positions: &[DurablePosition]) -> TailResult<Vec<LogEnd>> {
        positions
            .iter()
            .map(|d| {
                let p = &d.position.partition;
                log_end(&self.partition_dir(&p.topic, p.partition), d)
            })
            .collect()
    }
}

fn position_of(p: &PartitionRef, segment_base: i64, position: u64) -> Position {
    Position {
        partition: p.clone(),
        segment_base,
        position,
    }
}

/// Copies each piece `(file, from, to)` (the byte range `[from, to)` of a `.log`), in order, into `archive`
/// (temporary file, fsync, rename, fsync directory), streaming; its SHA-256.
fn write_archive(pieces: &[(PathBuf, u64, u64)], archive: &Path) -> TailResult<[u8; 32]> {
    copy_pieces(pieces, archive)?;
    sha256_file(archive)
}

fn copy_pieces(pieces: &[(PathBuf, u64, u64)], archive: &Path) -> TailResult<()> {
    let dir = archive.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| TailError::io(dir, e))?;
    let tmp = archive.with_extension("log.tmp");
    let mut out = File::create(&tmp).map_err(|e| TailError::io(&tmp, e))?;
    let mut buf = vec![0u8; ARCHIVE_COPY_BYTES];
    for (log, from, to) in pieces {
        if from == to {
            continue;
        }
        let len = fs::metadata(log).map_err(|e| TailError::io(log, e))?.len();
        if len < *to {
            return Err(TailError::BadState {
                path: log.to_path_buf(),
                reason: format!("{len} bytes, but the truncation journal names {to} and no archive holds them"),
            });
        }
        let mut src = File::open(log).map_err(|e| TailError::io(log, e))?;
        src.seek(SeekFrom::Start(*from)).map_err(|e| TailError::io(log, e))?;
        let mut left = to - from;
        while left > 0 {
            let want = usize::try_from(left).map_or(buf.len(), |l| l.min(buf.len()));
            let piece = &mut buf[..want];
            src.read_exact(piece).map_err(|e| TailError::io(log, e))?;
            out.write_all(piece).map_err(|e| TailError::io(&tmp, e))?;
            left -= want as u64;
        }
    }
    out.sync_all().map_err(|e| TailError::io(&tmp, e))?;
    drop(out);
    fs::rename(&tmp, archive).map_err(|e| TailError::io(archive, e))?;
    fsync_dir(dir)?;
    Ok(())
}

/// Removes `path`; a file already gone is fine (a repeat after a crash).
fn remove_if_present(path: &Path) -> TailResult<()> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(TailError::io(path, e)),
    }
}

/// Removes the producer snapshots (`<offset>.snapshot`) of `pdir` above `offset`: they describe producer state
/// after records the truncation removed (Kafka deletes them on truncation too).
fn remove_snapshots_above(pdir: &Path, offset: i64) -> TailResult<()> {
    let entries = match fs::read_dir(pdir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(TailError::io(pdir, e)),
    };
    for entry in entries {
        let path = entry.map_err(|e| TailError::io(pdir, e))?.path();
        let above = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".snapshot"))
            .and_then(|n| n.parse::<i64>().ok())
            .is_some_and(|at| at > offset);
        if above {
            remove_if_present(&path)?;
        }
    }
    Ok(())
}

fn sha256_file(path: &Path) -> TailResult<[u8; 32]> {
    Ok(digest_file(path)?.sha256.0)
}

/// The shipper's evidence for a cut checked against the mirror: its end (`end`, read off its bytes), the source's
/// epoch, the batches kept (`found`), the mirror's log start. The reason a Truncate is refused, if it is.
fn check_evidence(t: &Truncate, end: &LogEnd, found: &Scan, log_start: i64) -> Result<(), String> {
    if (end.end_offset, end.last_epoch) != (t.mirror_end_offset, t.mirror_epoch) {
        return Err(format!(
            "the evidence names the mirror's end as offset {} in epoch {}, its bytes end at offset {} in epoch {}",
            t.mirror_end_offset, t.mirror_epoch, end.end_offset, end.last_epoch
        ));
    }
    if t.truncate_to > t.source_end_offset {
        return Err(format!(
            "the cut is above where the source's epoch {} ends ({})",
            t.source_epoch, t.source_end_offset
        ));
    }
    if t.source_epoch >= 0 && found.kept_epoch > t.source_epoch {
        return Err(format!(
            "the batches kept end in epoch {}, above the source's epoch {}: they diverge too",
            found.kept_epoch, t.source_epoch
        ));
    }
    if t.truncate_to <= log_start {
        return Err(format!(
            "offset {} is at or below the mirror's log start {log_start}: nothing would remain",
            t.truncate_to
        ));
    }
    Ok(())
}
