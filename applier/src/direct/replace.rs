//! Compaction swaps on a tailed mirror: a new version of a range of sealed segments (the broker's cleaner rewrote
//! them, possibly merging several into one with the first one's base) is staged, validated completely and then
//! installed atomically in place of the old ones.
//!
//! The pieces arrive as `SegmentReplace` frames (feature `FEATURE_SEGMENT_REPLACE`, [`Inner::apply_replace`]):
//! each piece is staged, the last one (with the whole file's size, digest and companions) is validated and
//! installed. The feed's half (noticing that a sealed segment was rewritten) is `shipper::direct::replace`.
//! [`TailAppender::stage_replacement`] and [`TailAppender::install_replacement`] are the same two steps.
//!
//! # Staging
//! The bytes go to `<mirror>/.tail/staging/<topic>-<partition>-<base>.log`, outside the partition directory (a
//! broker or `verify` never sees a half-received replacement). Pieces must arrive in order (each starts at the staged
//! length; position 0 starts over).
//!
//! # What is checked before anything in the partition directory changes
//! - the replaced bases are mirror segments in offset order, contiguous (no mirror segment between them is left
//!   out); the segment the tail sealed last may be among them, the one it appends to only as the last one and
//!   with the source's next segment base (below);
//! - the staged file has the seal's size and SHA-256;
//! - every batch is whole, its CRC-32C matches, it is magic 2, its base offset is at or above the first replaced
//!   base, offsets strictly increase (a compacted log has gaps, never repeats), and the last offset lies below the
//!   next mirror segment's base (the replacement covers exactly the replaced range);
//! - each companion is inline or rebuilt (offset and time index) and matches its digest, as in a seal.
//!
//! # The segment being appended to
//! The cleaner never touches the source's active segment, but the mirror's active segment may be one the source
//! rolled, and cleaned, while the link was down: the shipper resumes there and finds it merged into an earlier
//! segment or rewritten alone (`shipper::direct::resume`). The replacement then names the source's next segment
//! base (`ReplaceEnd::next_base`, feature bit 7), which must lie at or above the mirror's end offset (else records
//! the mirror holds would be lost) and bounds the batches; the partition's state becomes the new segment sealed
//! at its size with that base as its next offset, so the next chunk starts the source's next segment at 0. The
//! open transactions there are derived from the segments (`companions`). In the catalog the sealed rows before the
//! tailed segment are replaced by a version ending at that base (an unsealed hand-over row is dropped with them),
//! or, replacing the tailed segment alone, it is recorded as that segment's seal.
//!
//! Decision: the records the mirror held are not compared with the new version's. A cleaner rewrites a batch it
//! removes records from (other bytes), and drops the last records of a merged segment when later segments
//! overwrite their keys (another last offset), so neither bytes nor an end offset can be required to match; what
//! is checked is what a replica of a compacted log can check: offsets strictly increasing within the replaced
//! range, every batch whole and CRC-valid, and the size and digest the shipper read.
//!
//! # Install: the crash protocol (as the broker's `.cleaned` → `.swap` → rename)
//! 1. the new `.log` and companions are written next to their final names with a `.swap` suffix (a suffix the
//!    broker and `verify` treat as in transit), fsynced, and the partition directory fsynced;
//! 2. a journal `.tail/replace/<topic>-<partition>.json` naming the files to delete and the `.swap` files to rename
//!    is written atomically: the commit point;
//! 3. the old files that no rename overwrites are unlinked, then each `.swap` is renamed over its final name
//!    (`.log` first), the directory fsynced, the journal removed.
//!
//! With a catalog, the replacement is checked against it before step 1 (the replaced bases must be a run of
//! installed sealed rows: `Catalog::check_replacement`), the journal carries what the catalog records, and step 3
//! records it (`Catalog::replace_sealed`) after the renames are durable and before the partition state and the
//! journal's removal say done; the redo at session start repeats it (idempotent).
//!
//! A crash before 2 leaves `.swap` files and no journal: the replacement never happened, and the next session start
//! ([`Inner::recover_replacements`]) removes them. A crash after 2 leaves the journal: the next session start
//! redoes 3, each step idempotent (an unlinked file is not there, a renamed `.swap` is not there either).

use std::io::Write as _;

use segment_format::dir::{classify_partition_file, PartitionFile, TransientSuffix};
use segmirror_transport::direct::payload::{Companion, LayoutSegment, SegmentReplace, Sha256};

use super::*;
use staged::{check_staged, Placed};

#[cfg(test)]
mod cover_tests;
mod staged;
#[cfg(test)]
pub(super) mod tests;

/// What a replacement's final piece says about it (as a seal about a segment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplaceSeal {
    pub partition: PartitionRef,
    /// The mirror's sealed segments it replaces, in offset order; the first is the new segment's base.
    pub replaced_bases: Vec<i64>,
    pub final_size: u64,
    pub log_sha256: Sha256,
    /// At most one per kind, as in a seal.
    pub companions: Vec<Companion>,
    /// The base of the source segment after the new one (feature bit 7); required when the replacement covers
    /// the segment the tail appends to.
    pub next_base: Option<i64>,
}

/// The commit record of an install (step 2 of the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Journal {
    topic: String,
    partition: i32,
    /// File names in the partition directory to unlink.
    delete: Vec<String>,
    /// File names to rename from `<name>.swap` to `<name>`, `.log` first.
    install: Vec<String>,
    /// The partition's new state, when the replacement covers the segment it recorded last (sealed).
    #[serde(default)]
    record: Option<PartitionState>,
    /// What the catalog records of it (with a catalog; absent in a journal written without one).
    #[serde(default)]
    catalog: Option<CatalogReplace>,
}

/// The catalog's part of a journaled replacement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct CatalogReplace {
    topic_id: TopicId,
    replaced_bases: Vec<i64>,
    size: u64,
    sha256: [u8; 32],
    last_offset: Option<i64>,
    manifest_key: String,
    /// The new version's end when it covers the tail (module doc, "The segment being appended to").
    #[serde(default)]
    next_offset: Option<i64>,
    /// It replaces the tailed segment alone (no sealed catalog row): the catalog records it as that segment's seal.
    #[serde(default)]
    covers_tail_only: bool,
}

impl CatalogReplace {
    fn replacement(&self) -> segmirror_catalog::Replacement {
        segmirror_catalog::Replacement {
            size: self.size,
            sha256: self.sha256,
            last_offset: self.last_offset,
            manifest_key: self.manifest_key.clone(),
            next_offset: self.next_offset,
        }
    }

    /// A replacement of the tailed segment alone (no sealed row replaced): recorded as that segment's seal.
    fn seal_record(&self) -> Option<catalog::SealRecord> {
        match (self.replaced_bases.as_slice(), self.next_offset) {
            ([base], Some(next_offset)) if self.covers_tail_only => Some(catalog::SealRecord {
                segment_base: *base,
                next_offset,
                size: self.size,
                sha256: self.sha256,
                txn_ends: None,
            }),
            _ => None,
        }
    }
}

fn swap_name(name: &str) -> String {
    format!("{name}{}", TransientSuffix::Swap.suffix())
}

impl TailAppender {
    /// Stages `bytes` at `position` of the replacement of `partition` starting at `base` (position 0 starts over).
    pub async fn stage_replacement(
        &mut self,
        partition: &PartitionRef,
        base: i64,
        position: u64,
        bytes: Vec<u8>,
    ) -> DirectResult<()> {
        let partition = partition.clone();
        self.run("staging a replacement segment", move |i| {
            i.stage_replacement(&partition, base, position, &bytes)
        })
        .await
    }

    /// Validates the staged replacement against `seal` and installs it in place of the replaced segments.
    pub async fn install_replacement(&mut self, seal: &ReplaceSeal) -> DirectResult<()> {
        let seal = seal.clone();
        self.run("installing a replacement segment", move |i| {
            i.install_replacement(&seal)
        })
        .await
    }
}

impl Inner {
    fn staging_path(&self, name: &str, base: i64) -> PathBuf {
        mirror::replace_staging_file(&self.root, name, base)
    }

    fn journal_path(&self, name: &str) -> PathBuf {
        mirror::replace_journal_file(&self.root, name)
    }

    /// One `SegmentReplace` piece: staged; the last one installed. Returns once staged (the last: once installed
    /// and durable). A cut mid-replacement leaves a staged prefix that the next first piece (position 0) replaces.
    pub(super) fn apply_replace(&mut self, piece: &SegmentReplace) -> TailResult<()> {
        let Some(&first) = piece.replaced_bases.first() else {
            return Err(TailError::BadSeal {
                partition: tp_name(&piece.partition),
                segment: -1,
                reason: "replacement of no segment".into(),
            });
        };
        self.stage_replacement(&piece.partition, first, piece.position, &piece.bytes)?;
        match &piece.end {
            None => Ok(()),
            Some(end) => self.install_replacement(&ReplaceSeal {
                partition: piece.partition.clone(),
                replaced_bases: piece.replaced_bases.clone(),
                final_size: end.final_size,
                log_sha256: end.log_sha256,
                companions: end.companions.clone(),
                next_base: end.next_base,
            }),
        }
    }

    fn stage_replacement(&mut self, p: &PartitionRef, base: i64, position: u64, bytes: &[u8]) -> TailResult<()> {
        let name = tp_name(p);
        if !valid_topic(&p.topic) || p.partition < 0 {
            return Err(TailError::BadTopic {
                partition: name,
                topic: p.topic.clone(),
            });
        }
        let path = self.staging_path(&name, base);
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(|e| TailError::io(dir, e))?;
        }
        let mut file = match OpenOptions::new()
            .write(true)
            .create(position == 0)
            .truncate(position == 0)
            .open(&path)
        {
            Ok(file) => file,
            // A later piece with nothing staged (its first piece never came, or went with an earlier session):
            // the peer's order, not this side's disk.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && position > 0 => {
                return Err(TailError::OutOfOrder {
                    partition: name,
                    segment: base,
                    position,
                    reason: "nothing of the replacement is staged: pieces must arrive in order from 0".into(),
                })
            }
            Err(e) => return Err(TailError::io(&path, e)),
        };
        let len = file.metadata().map_err(|e| TailError::io(&path, e))?.len();
        if len != position {
            return Err(TailError::OutOfOrder {
                partition: name,
                segment: base,
                position,
                reason: format!("the staged replacement holds {len} bytes: pieces must arrive in order"),
            });
        }
        file.seek(SeekFrom::Start(position))
            .map_err(|e| TailError::io(&path, e))?;
        file.write_all(bytes).map_err(|e| TailError::io(&path, e))?;
        Ok(())
    }

    fn install_replacement(&mut self, seal: &ReplaceSeal) -> TailResult<()> {
        let p = &seal.partition;
        let name = tp_name(p);
        let first = seal.replaced_bases.first().copied().unwrap_or(-1);
        let (state, range) = self.replaced_range(seal, &name, first)?;
        // The staged file: size and digest, then every batch and companion.
        let staged = self.staging_path(&name, first);
        let (last_offset, companions) = check_staged(seal, &staged, &name, first, range.upper)?;
        // The catalog must take it too (a run of installed sealed rows), before anything changes on disk.
        let catalog_part = self.catalog_replacement(seal, &name, &range, last_offset)?;
        // 1. The new files beside their final names, as `.swap`, durable.
        let pdir = self.partition_dir(&p.topic, p.partition);
        let install = write_swaps(&pdir, &staged, first, &companions)?;
        // 2. The journal: from here on the replacement happens, whatever crashes.
        let (journal_path, journal) = self.write_journal(seal, &state, &range, install, catalog_part)?;
        // 3.
        self.finish_install(&journal_path, &journal)?;
        tracing::info!(partition = %name, replaced = ?seal.replaced_bases, size = seal.final_size,
            "installed a compacted replacement");
        Ok(())
    }

    /// The mirror segments `seal` replaces, checked against what the mirror holds, and where the replacement must
    /// end (see the module doc); with the partition's recorded state.
    fn replaced_range(
        &self,
        seal: &ReplaceSeal,
        name: &str,
        first: i64,
    ) -> TailResult<(PartitionState, ReplacedRange)> {
        let p = &seal.partition;
        let bad = |reason: String| refused(name, first, reason);
        let Some(state) = self.states.get(name).cloned() else {
            return Err(bad("nothing of the partition is tailed".into()));
        };
        if state.topic_id != p.topic_id {
            return Err(bad("another topic id than the one tailed".into()));
        }
        if seal.replaced_bases.is_empty() || seal.replaced_bases.windows(2).any(|w| w[0] >= w[1]) {
            return Err(bad(format!(
                "replaced bases {:?} are not a non-empty increasing list",
                seal.replaced_bases
            )));
        }
        let pdir = self.partition_dir(&p.topic, p.partition);
        let mirror_bases = log_bases(&pdir)?;
        let last = seal.replaced_bases[seal.replaced_bases.len() - 1];
        let in_range: Vec<i64> = mirror_bases
            .iter()
            .copied()
            .filter(|b| (first..=last).contains(b))
            .collect();
        if in_range != seal.replaced_bases {
            return Err(bad(format!(
                "replaced bases {:?}, but the mirror's segments in that range are {in_range:?}",
                seal.replaced_bases
            )));
        }
        // The one the tail sealed last may be rewritten before the first chunk of the next one arrived: its
        // recorded size then follows the new file. The one it appends to only as the last one replaced, when the
        // source rolled it and its cleaner merged or rewrote it while the link was down (the shipper resumed there):
        // the source's next segment base bounds the replacement and becomes the mirror's end (see the module doc).
        let replaces_recorded = (first..=last).contains(&state.segment_base);
        let covers_tail = replaces_recorded && !state.sealed;
        if covers_tail && last != state.segment_base {
            return Err(bad(format!(
                "segment {} is the one the tail appends to, but not the last one replaced",
                state.segment_base
            )));
        }
        // The replacement must stay below the next segment; for the last sealed one, below the next offset the
        // tail expects; for the tailed one, below the source's next segment base, which must not lie below what
        // the mirror holds.
        let next_mirror_base = mirror_bases.iter().copied().find(|b| *b > last);
        let upper = match next_mirror_base {
            Some(upper) => upper,
            None if covers_tail => {
                let Some(next_base) = seal.next_base else {
                    return Err(bad(format!(
                        "segment {} is the one the tail appends to; a replacement of it must name the source's next \
                         segment base (a shipper without the MirrorLayout feature)",
                        state.segment_base
                    )));
                };
                let end = state.next_offset.unwrap_or(state.segment_base);
                if next_base < end || next_base <= last {
                    return Err(bad(format!(
                        "it ends at the next segment base {next_base}, below the mirror's end offset {end} in \
                         segment {last}: records the mirror holds would be lost"
                    )));
                }
                next_base
            }
            // The last sealed one merged with segments the mirror has not received yet: the source's next base.
            None if replaces_recorded => match seal.next_base {
                Some(next_base) => {
                    let end = state.next_offset.unwrap_or(state.segment_base);
                    if next_base < end {
                        return Err(bad(format!(
                            "it ends at the next segment base {next_base}, below the mirror's end offset {end}"
                        )));
                    }
                    next_base
                }
                None => state.next_offset.unwrap_or(i64::MAX),
            },
            None => return Err(bad("no mirror segment follows the replaced range".into())),
        };
        Ok((
            state,
            ReplacedRange {
                upper,
                replaces_recorded,
                covers_tail,
                next_mirror_base,
            },
        ))
    }

    /// What the catalog records of the replacement (with a catalog), checked against its rows before anything
    /// changes on disk.
    fn catalog_replacement(
        &mut self,
        seal: &ReplaceSeal,
        name: &str,
        range: &ReplacedRange,
        last_offset: Option<i64>,
    ) -> TailResult<Option<CatalogReplace>> {
        let p = &seal.partition;
        let first = seal.replaced_bases.first().copied().unwrap_or(-1);
        let ReplacedRange {
            upper,
            replaces_recorded,
            covers_tail,
            next_mirror_base,
        } = *range;
        Ok(match &mut self.catalog {
            None => None,
            Some(catalog) => {
                catalog.check_writable(p, None)?;
                // The tailed segment is usually no sealed row of the catalog (it may be one: a crash between the
                // catalog's seal and the state file's): then the sealed rows before it are replaced, and the new
                // version reaches the source's next segment base.
                let mut part = CatalogReplace {
                    topic_id: p.topic_id,
                    covers_tail_only: false,
                    replaced_bases: seal.replaced_bases.clone(),
                    size: seal.final_size,
                    sha256: seal.log_sha256,
                    last_offset,
                    manifest_key: format!(
                        "{TAIL_MANIFEST_KEY_PREFIX}{name}/{}",
                        segment_file_name(first, SegmentFileKind::Log)
                    ),
                    // Up to the mirror's next segment too: its catalog rows may end below it, when a segment
                    // the cleaner merged into this one never reached the mirror (the tail went on past it).
                    next_offset: ((replaces_recorded && seal.next_base.is_some()) || next_mirror_base.is_some())
                        .then_some(upper),
                };
                let whole = catalog.check_replacement(p, &part.replaced_bases, &part.replacement());
                if whole.is_err() && covers_tail {
                    part.replaced_bases.pop();
                    if part.replaced_bases.is_empty() {
                        part.replaced_bases = vec![first];
                        part.covers_tail_only = true;
                    } else {
                        catalog.check_replacement(p, &part.replaced_bases, &part.replacement())?;
                    }
                } else {
                    whole?;
                }
                Some(part)
            }
        })
    }

    /// Step 2 of the install: the journal naming the files to delete (the replaced segments' in `[first, upper)`)
    /// and those to rename, written atomically; from here on the replacement happens, whatever crashes.
    fn write_journal(
        &self,
        seal: &ReplaceSeal,
        state: &PartitionState,
        range: &ReplacedRange,
        install: Vec<String>,
        catalog_part: Option<CatalogReplace>,
    ) -> TailResult<(PathBuf, Journal)> {
        let p = &seal.partition;
        let name = tp_name(p);
        let first = seal.replaced_bases.first().copied().unwrap_or(-1);
        let ReplacedRange {
            upper,
            replaces_recorded,
            ..
        } = *range;
        let pdir = self.partition_dir(&p.topic, p.partition);
        let mut delete = Vec::new();
        for entry in fs::read_dir(&pdir).map_err(|e| TailError::io(&pdir, e))? {
            let entry = entry.map_err(|e| TailError::io(&pdir, e))?;
            let file_name = entry.file_name().to_string_lossy().into_owned();
            if let PartitionFile::Segment { base_offset, kind } = classify_partition_file(&file_name) {
                // The replaced segments' files; producer snapshots are not the cleaner's business.
                if kind != SegmentFileKind::Snapshot
                    && (first..upper).contains(&base_offset)
                    && !install.contains(&file_name)
                {
                    delete.push(file_name);
                }
            }
        }
        delete.sort();
        let journal = Journal {
            topic: p.topic.clone(),
            partition: p.partition,
            delete,
            install,
            record: replaces_recorded.then(|| PartitionState {
                segment_base: first,
                position: seal.final_size,
                sealed: true,
                // Covering the tail: the source's next segment base is where the next chunk's offsets start, and
                // the transactions open there are derived from the new segments (`companions`).
                next_offset: if replaces_recorded && seal.next_base.is_some() {
                    Some(upper)
                } else {
                    state.next_offset
                },
                open_transactions: if replaces_recorded && seal.next_base.is_some() {
                    None
                } else {
                    state.open_transactions.clone()
                },
                // Facts of the replaced segment's bytes, which are gone.
                kept: None,
                ..state.clone()
            }),
            catalog: catalog_part,
        };
        let journal_path = self.journal_path(&name);
        if let Some(dir) = journal_path.parent() {
            if !dir.exists() {
                fs::create_dir_all(dir).map_err(|e| TailError::io(dir, e))?;
                fsync_dir(&mirror::tail_dir(&self.root))?;
            }
        }
        let bytes = serde_json::to_vec_pretty(&journal).map_err(|e| TailError::BadState {
            path: journal_path.clone(),
            reason: e.to_string(),
        })?;
        write_atomically(&journal_path, &bytes)?;
        Ok((journal_path, journal))
    }

    /// Step 3 of the install (idempotent): unlink, rename the `.swap` files, fsync, drop the journal.
    fn finish_install(&mut self, journal_path: &Path, journal: &Journal) -> TailResult<()> {
        let pdir = self.partition_dir(&journal.topic, journal.partition);
        // Before any file changes: the kept epoch history no longer vouches for the replaced bytes (`kept`).
        self.distrust_epochs_below_active(&format!("{}-{}", journal.topic, journal.partition))?;
        for name in &journal.delete {
            let path = pdir.join(name);
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(TailError::io(&path, e)),
            }
        }
        for name in &journal.install {
            let from = pdir.join(swap_name(name));
            match fs::rename(&from, pdir.join(name)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(TailError::io(&from, e)),
            }
        }
        fsync_dir(&pdir)?;
        // The files are durable: the catalog follows, before the state and the journal say done.
        if let (Some(catalog), Some(c)) = (&mut self.catalog, &journal.catalog) {
            let p = PartitionRef {
                topic: journal.topic.clone(),
                partition: journal.partition,
                topic_id: c.topic_id,
            };
            match c.seal_record() {
                Some(record) => catalog.record_seal(&p, &record)?,
                None => catalog.record_replacement(&p, &c.replaced_bases, &c.replacement())?,
            }
        }
        if let Some(state) = &journal.record {
            let name = format!("{}-{}", journal.topic, journal.partition);
            if state.topic != journal.topic || state.partition != journal.partition {
                return Err(TailError::BadState {
                    path: journal_path.to_path_buf(),
                    reason: format!(
                        "its partition state names {}-{}, not {name}",
                        state.topic, state.partition
                    ),
                });
            }
            // The active segment's kept indexes belong to a segment that is gone now.
            self.forget_indexes(&name);
            let derive = state.open_transactions.is_none();
            self.record(name.clone(), state.clone())?;
            if derive {
                self.open_transactions(&name)?;
            }
        }
        fs::remove_file(journal_path).map_err(|e| TailError::io(journal_path, e))?;
        if let Some(dir) = journal_path.parent() {
            fsync_dir(dir)?;
        }
        Ok(())
    }

    /// At a session start: completes every journaled install, and removes the `.swap` files of installs that
    /// crashed before their journal (and stale staging files).
    pub(super) fn recover_replacements(&mut self) -> TailResult<()> {
        let jdir = mirror::replace_journal_dir(&self.root);
        let mut journaled = Vec::new();
        match fs::read_dir(&jdir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(TailError::io(&jdir, e)),
            Ok(entries) => {
                for entry in entries {
                    let path = entry.map_err(|e| TailError::io(&jdir, e))?.path();
                    if !mirror::is_record(&path) {
                        continue;
                    }
                    let bytes = fs::read(&path).map_err(|e| TailError::io(&path, e))?;
                    let journal: Journal = serde_json::from_slice(&bytes).map_err(|e| TailError::BadState {
                        path: path.clone(),
                        reason: e.to_string(),
                    })?;
                    if !valid_topic(&journal.topic)
                        || journal
                            .delete
                            .iter()
                            .chain(&journal.install)
                            .any(|n| !matches!(classify_partition_file(n), PartitionFile::Segment { .. }))
                    {
                        return Err(TailError::BadState {
                            path,
                            reason: "names a partition or files that are not segment files".into(),
                        });
                    }
                    tracing::warn!(journal = %path.display(), "completing a replacement a crash interrupted");
                    self.finish_install(&path, &journal)?;
                    journaled.push(format!("{}-{}", journal.topic, journal.partition));
                }
            }
        }
        // `.swap` files without a journal: an install that never reached its commit point. And `<name>.tmp` files:
        // the staging file of an atomic rewrite (a seal's companions, a checkpoint) that a crash stopped before its
        // rename, the rewrite's commit point; the rewrite is redone or superseded (a seal resent, or covered by a
        // replacement), so nothing reads them, and `promote` refuses a mirror that still holds one.
        let names: Vec<String> = self.states.keys().cloned().collect();
        for name in names {
            let Some(s) = self.states.get(&name) else { continue };
            let pdir = self.partition_dir(&s.topic, s.partition);
            let Ok(entries) = fs::read_dir(&pdir) else { continue };
            let mut removed = false;
            for entry in entries {
                let entry = entry.map_err(|e| TailError::io(&pdir, e))?;
                let file_name = entry.file_name().to_string_lossy().into_owned();
                if let PartitionFile::Transient {
                    suffix: TransientSuffix::Swap,
                    ..
                }
                | PartitionFile::Temp { .. } = classify_partition_file(&file_name)
                {
                    let path = entry.path();
                    fs::remove_file(&path).map_err(|e| TailError::io(&path, e))?;
                    removed = true;
                }
            }
            if removed {
                tracing::warn!(partition = %name, "removed files a crash left uncommitted (.swap, .tmp)");
                fsync_dir(&pdir)?;
            }
        }
        Ok(())
    }
}

impl Inner {
    /// Per tailed partition, its sealed segments on disk (base, `.log` size): every `.log` but the one the tail
    /// appends to. What the shipper compares with the source to find the rewrites made while it did not run.
    pub(super) fn mirror_layout(&self) -> TailResult<Vec<(PartitionRef, Vec<LayoutSegment>)>> {
        let mut out = Vec::with_capacity(self.states.len());
        for s in self.states.values() {
            let pdir = self.partition_dir(&s.topic, s.partition);
            let mut segments = Vec::new();
            if pdir.exists() {
                for base in log_bases(&pdir)? {
                    if base == s.segment_base && !s.sealed {
                        continue;
                    }
                    let path = pdir.join(segment_file_name(base, SegmentFileKind::Log));
                    let size = fs::metadata(&path).map_err(|e| TailError::io(&path, e))?.len();
                    segments.push(LayoutSegment { base, size });
                }
            }
            out.push((
                PartitionRef {
                    topic: s.topic.clone(),
                    partition: s.partition,
                    topic_id: s.topic_id,
                },
                segments,
            ));
        }
        Ok(out)
    }
}

/// The mirror's `.log` base offsets in `dir`, in order.
fn log_bases(dir: &Path) -> TailResult<Vec<i64>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| TailError::io(dir, e))? {
        let entry = entry.map_err(|e| TailError::io(dir, e))?;
        if let PartitionFile::Segment {
            base_offset,
            kind: SegmentFileKind::Log,
        } = classify_partition_file(&entry.file_name().to_string_lossy())
        {
            out.push(base_offset);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// The mirror segments a replacement covers and where it must end ([`Inner::replaced_range`]).
#[derive(Debug, Clone, Copy)]
struct ReplacedRange {
    /// The replacement's batches end below this offset (the next segment's base, or the source's).
    upper: i64,
    /// It covers the segment the partition's state records last.
    replaces_recorded: bool,
    /// That segment is the one the tail appends to (unsealed).
    covers_tail: bool,
    /// The mirror's first segment after the replaced ones.
    next_mirror_base: Option<i64>,
}

/// A replacement refused: its partition `name`, its first replaced base.
fn refused(name: &str, first: i64, reason: String) -> TailError {
    TailError::BadSeal {
        partition: name.to_string(),
        segment: first,
        reason: format!("replacement: {reason}"),
    }
}

/// Step 1 of the install: the new `.log` (moved from `staged`) and `companions` beside their final names in `pdir`
/// as `.swap` files, durable. Returns the final names, `.log` first.
fn write_swaps(pdir: &Path, staged: &Path, first: i64, companions: &[Placed]) -> TailResult<Vec<String>> {
    let log_name = segment_file_name(first, SegmentFileKind::Log);
    let log_swap = pdir.join(swap_name(&log_name));
    {
        let f = File::open(staged).map_err(|e| TailError::io(staged, e))?;
        f.sync_all().map_err(|e| TailError::io(staged, e))?;
    }
    fs::rename(staged, &log_swap).map_err(|e| TailError::io(&log_swap, e))?;
    let mut install = vec![log_name];
    for (kind, bytes) in companions {
        let final_name = segment_file_name(first, *kind);
        let path = pdir.join(swap_name(&final_name));
        let mut f = File::create(&path).map_err(|e| TailError::io(&path, e))?;
        f.write_all(bytes).map_err(|e| TailError::io(&path, e))?;
        f.sync_all().map_err(|e| TailError::io(&path, e))?;
        install.push(final_name);
    }
    fsync_dir(pdir)?;
    if let Some(dir) = staged.parent() {
        fsync_dir(dir)?;
    }
    Ok(install)
}
