//! Retention on a tailed mirror: the mirror deletes what the source deleted.
//!
//! The shipper tells the source partition's log start offset (a `LogStart` frame, feature
//! `FEATURE_LOG_START`); every mirror segment wholly below it is gone from the source. A segment is wholly below
//! the log start `L` when a later mirror segment starts at or below `L`: the *first kept* segment is the newest
//! one whose base is at most `L`, and everything before it goes. The segment being tailed is the newest, so it is
//! never deleted; neither is a segment that would leave the mirror without a segment holding `L`.
//!
//! Why whole segments only: a broker deletes whole segments too (retention and `DeleteRecords` move the log start
//! inside a segment and leave the segment in place), so the mirror's files stay the source's files.
//!
//! # Keeping deleted segments longer
//! By default ([`DEFAULT_RETAIN_DELETED_FOR`]) a segment goes as soon as the source's log start passes it.
//! [`TailAppender::retain_deleted_for`] keeps it that much longer, measured from when the appender first saw it
//! below the log start (recorded, so a restart does not restart the clock). Due segments are deleted whenever a
//! LogStart or a seal arrives and at the start of every session.
//!
//! # Durability order
//! record the new log start (and the clock of each kept segment) in `.tail/retention/<topic>-<partition>.json`
//! (written atomically) → unlink each due segment's files, `.log` first → fsync the partition directory → record
//! again without the deleted segments. With a catalog, the log start goes into it (`Catalog::advance_log_start`:
//! the partition's log start, the rows of segments wholly below it dropped) after the unlinks are durable and
//! before the record is written again, and at every sweep (a no-op write when nothing changed), so the recovery
//! sweep at session start brings a catalog a crash left behind up to date. Segments kept longer
//! ([`TailAppender::retain_deleted_for`]) leave the catalog when the source's log start passes them: they are
//! outside the partition's log (promote does not copy them), a safety copy on disk only. A partition the catalog
//! holds paused or promoted is never swept (its files belong to a promotion, or to a broker). A crash anywhere leaves a recorded log start whose deletions the next sweep
//! (at the latest the next session start) completes: deletion is idempotent, and a companion left without its
//! `.log` is removed by the same rule (its offset is below the first kept segment).
//!
//! # The segment being tailed
//! A log start above the base of the *unsealed* segment being tailed means the source deleted that segment before
//! the mirror got all of it (the shipper was down or the link cut longer than the source's retention; the
//! shipper then resumes at the source's first segment and sends its base first, `shipper::direct::log_start`). It
//! will never be sealed, so it goes like a segment retention deleted, in this order: the record notes its base
//! as unsealed (due at once) → the partition state claims the log start's segment at byte 0 (nothing active, the
//! next segment starts there; a session resumes at that claim, which the shipper seeks to, or skips again with a
//! new LogStart if retention passed it too) → the sweep deletes it as above. A crash before the state is written
//! resumes at the old position and the shipper tells the log start again; after it, the recovery sweep deletes
//! the files. With [`TailAppender::retain_deleted_for`] it is deleted all the same: a prefix without indexes is no
//! valid segment to keep. The offsets from the mirror's next offset up to the log start are lost to the mirror,
//! as they are to the source (logged at warn on both sides).
//!
//! # Beyond the installed end
//! A log start is applied only within what the mirror holds: at or below the partition's installed end (the
//! offset after its last durable batch). The shipper never tells more than it shipped (`shipper::direct::log_start`)
//! and frames are applied in order, so an honest log start beyond the installed end means one thing: retention
//! deleted at the source whole segments the mirror had not got yet, and the shipper continues at the source's
//! first segment, whose base it told. Applying such a value at once would let any peer delete the whole mirror
//! (a log start of 10^12 once deleted every sealed segment), and, recorded, every segment sealed after it. So it
//! is *held* in the record, deleting nothing, until the shipper proves it by continuing as a retention skip does:
//! when the tail leaves the segment it was tailing then for a segment at or below the value (leaving it unsealed,
//! as deleted at the source, or, if it was sealed, with a gap after the end the mirror had then), that segment's
//! base becomes the log start (the value itself once the installed end reaches it, told again). A tail going on
//! to the next segment (at the end of the sealed one) proves nothing and drops the value. A held value also lets
//! the tail leave an unsealed segment for that later one (see above). It is dropped as well when another is told
//! and at the start of every session (each session tells its log start again), so a value no shipper followed
//! never deletes anything. Whatever the log start, the segment being tailed and everything after
//! it stay.
//!
//! # Where promotion finds the log start
//! In the partition's catalog row: every sweep hands the recorded log start ([`tailed_log_start`]) to
//! `Catalog::advance_log_start` (see the durability order above), and promote writes `log-start-offset-checkpoint`
//! from the row.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use segment_format::dir::{classify_partition_file, PartitionFile};
use segmirror_transport::direct::payload::LogStart;

use super::*;

#[cfg(test)]
mod tests;

/// How long the mirror keeps a segment after the source deleted it, by default: not at all. Why: the mirror is a
/// copy of what the source holds; keeping more makes it grow without the bound the source's retention sets, and a
/// promoted broker would start at another log start than the source. An operator who wants a safety margin
/// (retention misconfigured on the source) sets [`TailAppender::retain_deleted_for`].
pub const DEFAULT_RETAIN_DELETED_FOR: Duration = Duration::ZERO;

/// What the retention record holds for one partition.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct RetentionState {
    pub topic: String,
    pub partition: i32,
    pub topic_id: TopicId,
    /// The source's log start offset as last told.
    pub log_start: Option<i64>,
    /// Segments wholly below the log start that are still kept: base offset → when first seen below it (Unix ms).
    pub below_start_since: BTreeMap<i64, u64>,
    /// Segments the source deleted before they were sealed (see "The segment being tailed"): due at once, whatever
    /// [`TailAppender::retain_deleted_for`] says, since an unsealed prefix is no valid segment to keep.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub unsealed: BTreeSet<i64>,
    /// A log start told beyond the installed end, held until the shipper continues past it (module docs, "Beyond
    /// the installed end").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<HeldLogStart>,
}

/// A log start told beyond the partition's installed end (module docs, "Beyond the installed end").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct HeldLogStart {
    /// The value told.
    pub log_start: i64,
    /// The partition's installed end when it was told (`None`: nothing installed).
    pub installed_end: Option<i64>,
    /// The segment being tailed when it was told, and whether it was sealed (`None`: nothing tailed).
    pub tailed: Option<(i64, bool)>,
}

impl HeldLogStart {
    /// The log start the held value proves, now that the segment being tailed is `tailed` and `unsealed` holds the
    /// unsealed segments the tail left as deleted at the source: `tailed`'s base, when the shipper continued there
    /// as the retention skip the value announced: at a segment not past the value, after leaving the segment
    /// tailed then unsealed, or, if that one was sealed, with a gap after it (a segment starting right at the
    /// installed end is the tail going on, which proves nothing).
    fn proven_by(&self, tailed: i64, unsealed: &BTreeSet<i64>) -> Option<i64> {
        let skipped = match self.tailed {
            None => true,
            Some((base, _)) if base == tailed => false,
            Some((base, false)) => unsealed.contains(&base),
            Some((_, true)) => self.installed_end.is_none_or(|end| tailed > end),
        };
        (skipped && tailed <= self.log_start).then_some(tailed)
    }
}

/// What a session start does with a held log start no continuation proved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// Kept (a LogStart or a seal: the session that told it goes on).
    Keep,
    /// Dropped (a session start: the new session tells its own).
    Drop,
}

/// The log start offset last recorded for a tailed partition of the mirror at `root`, if any.
pub fn tailed_log_start(root: &Path, topic: &str, partition: i32) -> TailResult<Option<i64>> {
    let path = record_path(root, &format!("{topic}-{partition}"));
    Ok(read_record(&path)?.and_then(|r| r.log_start))
}

pub(super) fn record_path(root: &Path, name: &str) -> PathBuf {
    crate::mirror::retention_file(root, name)
}

fn read_record(path: &Path) -> TailResult<Option<RetentionState>> {
    match fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(TailError::io(path, e)),
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| TailError::BadState {
                path: path.to_path_buf(),
                reason: e.to_string(),
            }),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl TailAppender {
    /// Keeps segments the source deleted `keep` longer than the source (default [`DEFAULT_RETAIN_DELETED_FOR`]).
    pub fn retain_deleted_for(self, keep: Duration) -> TailAppender {
        {
            let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
            inner.retain_deleted_for = keep;
        }
        self
    }
}

impl Inner {
    fn write_record(&self, name: &str, record: &RetentionState) -> TailResult<()> {
        let path = record_path(&self.root, name);
        let Some(dir) = path.parent() else {
            return Err(TailError::BadState {
                path,
                reason: "no parent directory".into(),
            });
        };
        if !dir.exists() {
            fs::create_dir_all(dir).map_err(|e| TailError::io(dir, e))?;
            fsync_dir(&crate::mirror::tail_dir(&self.root))?;
            fsync_dir(&self.root)?;
        }
        let bytes = serde_json::to_vec_pretty(record).map_err(|e| TailError::BadState {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        write_atomically(&path, &bytes)?;
        Ok(())
    }

    /// The source's log start moved: record it, then delete what is due.
    pub(super) fn apply_log_start(&mut self, ls: &LogStart) -> TailResult<()> {
        let p = &ls.partition;
        let name = tp_name(p);
        if !valid_topic(&p.topic) || p.partition < 0 {
            return Err(TailError::BadTopic {
                partition: name,
                topic: p.topic.clone(),
            });
        }
        if let Some(s) = self.states.get(&name) {
            if s.topic_id != p.topic_id {
                return Err(TailError::OutOfOrder {
                    partition: name,
                    segment: s.segment_base,
                    position: s.position,
                    reason: "a LogStart for another topic id (a recreated topic) than the one tailed".into(),
                });
            }
        }
        if ls.log_start_offset < 0 {
            // No source has a negative log start: bad peer data, refused before anything is recorded.
            let s = self.states.get(&name);
            return Err(TailError::OutOfOrder {
                partition: name,
                segment: s.map_or(-1, |s| s.segment_base),
                position: s.map_or(0, |s| s.position),
                reason: format!("a LogStart at the negative offset {}", ls.log_start_offset),
            });
        }
        let path = record_path(&self.root, &name);
        let mut record = read_record(&path)?.unwrap_or_else(|| RetentionState {
            topic: p.topic.clone(),
            partition: p.partition,
            topic_id: p.topic_id,
            ..RetentionState::default()
        });
        if record.topic_id != p.topic_id {
            // A recreated topic: what was recorded is about the old lineage.
            record = RetentionState {
                topic: p.topic.clone(),
                partition: p.partition,
                topic_id: p.topic_id,
                ..RetentionState::default()
            };
        }
        let installed_end = self.states.get(&name).and_then(|s| s.next_offset);
        let told = ls.log_start_offset;
        if installed_end.is_none_or(|end| told > end) {
            // Beyond what the mirror holds: held, nothing deleted (module docs, "Beyond the installed end").
            let held = HeldLogStart {
                log_start: told,
                installed_end,
                tailed: self.states.get(&name).map(|s| (s.segment_base, s.sealed)),
            };
            if record.log_start.is_some_and(|l| l >= told) {
                tracing::debug!(partition = %name, told, "a log start at or below the recorded one");
            } else if record.held != Some(held) {
                tracing::warn!(partition = %name, told, installed_end = ?installed_end,
                    "a LogStart beyond the mirror's installed end: held, nothing deleted, until the shipper \
                     continues at a segment past the mirror's end (the source's retention deleted segments the \
                     mirror had not got)");
                record.held = Some(held);
                self.write_record(&name, &record)?;
            }
            return self.sweep(&name, record, Held::Keep);
        }
        match record.log_start {
            Some(old) if old > told => {
                tracing::warn!(partition = %name, recorded = old, told,
                    "the source's log start went backwards; keeping the recorded one");
            }
            Some(old) if old == told && record.held.is_none() => {}
            _ => {
                record.log_start = Some(record.log_start.map_or(told, |old| old.max(told)));
                // Told again within the installed range: what was held is replaced.
                record.held = None;
                self.write_record(&name, &record)?;
            }
        }
        self.sweep(&name, record, Held::Keep)
    }

    /// The log start the source told for the partition `name`, recorded or held (module docs, "Beyond the installed
    /// end"): a tail may leave an unsealed segment for a segment at or below it.
    pub(super) fn recorded_log_start(&self, name: &str) -> TailResult<Option<i64>> {
        let record = read_record(&record_path(&self.root, name))?;
        Ok(record.and_then(|r| r.log_start.max(r.held.map(|h| h.log_start))))
    }

    /// The source deleted segment `base`, being tailed, before sealing it (the shipper continues at a later
    /// segment, at or below the recorded log start): noted as due at once, before the partition state moves past
    /// it (module docs, "The segment being tailed").
    pub(super) fn note_unsealed_deleted(&mut self, name: &str, base: i64, position: u64) -> TailResult<()> {
        let path = record_path(&self.root, name);
        let Some(mut record) = read_record(&path)? else {
            return Err(TailError::BadState {
                path,
                reason: format!("no log start recorded, yet segment {base} is dropped as deleted by the source"),
            });
        };
        tracing::warn!(partition = %name, segment = base, durable_bytes = position, log_start = ?record.log_start,
            "the source deleted the segment being tailed before it was sealed: dropping the mirror's copy; the \
             offsets from the mirror's next offset up to the log start are lost to the mirror as to the source");
        if record.unsealed.insert(base) {
            self.write_record(name, &record)?;
        }
        Ok(())
    }

    /// Applies the recorded log start of the partition `name` (if any) again: what came due is deleted.
    pub(super) fn sweep_partition(&mut self, name: &str) -> TailResult<()> {
        self.sweep_partition_then(name, Held::Keep)
    }

    fn sweep_partition_then(&mut self, name: &str, held: Held) -> TailResult<()> {
        match read_record(&record_path(&self.root, name))? {
            Some(record) => self.sweep(name, record, held),
            None => Ok(()),
        }
    }

    /// Every partition with a retention record (at the start of a session).
    pub(super) fn sweep_all(&mut self) -> TailResult<()> {
        let names: Vec<String> = self.states.keys().cloned().collect();
        for name in names {
            match self.sweep_partition_then(&name, Held::Drop) {
                Err(TailError::NotWritable { partition, state, .. }) => {
                    tracing::info!(%partition, %state, "not sweeping a partition the catalog holds {state}");
                }
                other => other?,
            }
        }
        Ok(())
    }

    /// Deletes the segments of `record`'s partition that are wholly below its log start and due. First a held log
    /// start the tail's progress proved becomes the log start; one still held is dropped when `held` says so.
    fn sweep(&mut self, name: &str, mut record: RetentionState, held: Held) -> TailResult<()> {
        // Never the segment being tailed, nor anything after it.
        let tailed = self.states.get(name).map(|s| s.segment_base);
        if let Some(h) = record.held {
            let proven = tailed.and_then(|t| h.proven_by(t, &record.unsealed));
            // The tail left the segment it was tailing when the value was told: it proved the value now or never.
            let moved_on = tailed.is_some() && tailed != h.tailed.map(|(base, _)| base);
            if let Some(proven) = proven {
                tracing::info!(partition = %name, log_start = proven, told = h.log_start,
                    "the shipper continued past the mirror's end: the held log start applies");
                record.log_start = Some(record.log_start.map_or(proven, |l| l.max(proven)));
            } else if moved_on || held == Held::Drop {
                tracing::warn!(partition = %name, told = h.log_start,
                    "a LogStart beyond the mirror's installed end that the shipper did not follow with the retention \
                     skip it announces: dropped, nothing deleted");
            }
            if proven.is_some() || moved_on || held == Held::Drop {
                // Proven or not, a held value acts once: a part of it above the segment proven is the shipper's to
                // tell again once it shipped up to it (it then lies within the installed range).
                record.held = None;
                self.write_record(name, &record)?;
            }
        }
        let Some(log_start) = record.log_start else {
            return Ok(());
        };
        let pref = PartitionRef {
            topic: record.topic.clone(),
            partition: record.partition,
            topic_id: record.topic_id,
        };
        if let Some(catalog) = &mut self.catalog {
            catalog.check_writable(&pref, None)?;
        }
        let pdir = self.partition_dir(&record.topic, record.partition);
        // Every offset-named file of the directory, by offset.
        let mut files: Vec<(i64, SegmentFileKind, PathBuf)> = Vec::new();
        let entries = match fs::read_dir(&pdir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(TailError::io(&pdir, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| TailError::io(&pdir, e))?;
            let file_name = entry.file_name();
            let Some(file_name) = file_name.to_str() else { continue };
            if let PartitionFile::Segment { base_offset, kind } = classify_partition_file(file_name) {
                files.push((base_offset, kind, entry.path()));
            }
        }
        let mut log_bases: Vec<i64> = files
            .iter()
            .filter(|(_, kind, _)| *kind == SegmentFileKind::Log)
            .map(|(base, _, _)| *base)
            .collect();
        log_bases.sort_unstable();
        // The newest segment starting at or below the log start holds it: it and everything after it stay. The
        // tailed segment counts even before its file exists (a claim at byte 0): what precedes it is complete.
        // Never above the tailed segment: it and what follows it stay whatever the log start.
        let Some(first_kept) = log_bases
            .iter()
            .copied()
            .chain(tailed)
            .filter(|b| *b <= log_start)
            .max()
            .map(|b| tailed.map_or(b, |t| b.min(t)))
        else {
            return self.log_start_to_catalog(&pref, log_start);
        };
        let keep = self.retain_deleted_for;
        let now = now_ms();
        let mut due: Vec<i64> = Vec::new();
        let mut clock_started = false;
        for base in log_bases.iter().copied().filter(|b| *b < first_kept) {
            if tailed == Some(base) {
                continue;
            }
            if record.unsealed.contains(&base) {
                due.push(base);
                continue;
            }
            let since = *record.below_start_since.entry(base).or_insert_with(|| {
                clock_started = true;
                now
            });
            let kept_ms = u64::try_from(keep.as_millis()).unwrap_or(u64::MAX);
            if now.saturating_sub(since) >= kept_ms {
                due.push(base);
            }
        }
        if clock_started {
            self.write_record(name, &record)?;
        }
        // A file goes with the segment it belongs to: the newest log base at or below its offset (none: a
        // leftover of an interrupted deletion, below every segment).
        let owner = |offset: i64| log_bases.iter().rev().find(|b| **b <= offset).copied();
        let mut doomed: Vec<&(i64, SegmentFileKind, PathBuf)> = files
            .iter()
            .filter(|(offset, _, _)| {
                *offset < first_kept && owner(*offset).is_none_or(|b| due.contains(&b) && tailed != Some(b))
            })
            .collect();
        if doomed.is_empty() {
            return self.log_start_to_catalog(&pref, log_start);
        }
        // `.log` first: once it is gone the segment is gone; a companion left by a crash is removed next time.
        doomed.sort_by_key(|(offset, kind, _)| (*kind != SegmentFileKind::Log, *offset));
        for (_, _, path) in &doomed {
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(TailError::io(path, e)),
            }
        }
        fsync_dir(&pdir)?;
        tracing::info!(partition = %name, log_start, segments = due.len(), files = doomed.len(),
            "deleted mirror segments the source deleted");
        // The deletions are durable: the catalog follows, before the record drops them (module docs).
        self.log_start_to_catalog(&pref, log_start)?;
        for base in &due {
            record.below_start_since.remove(base);
            record.unsealed.remove(base);
        }
        self.write_record(name, &record)
    }
}

impl Inner {
    fn log_start_to_catalog(&mut self, p: &PartitionRef, log_start: i64) -> TailResult<()> {
        match &mut self.catalog {
            Some(catalog) => catalog.record_log_start(p, log_start),
            None => Ok(()),
        }
    }
}
