//! A partition's files moved aside, never deleted: when the operator accepted a recreated source topic (its new
//! lineage), and when a segment the tail appended to turns out to differ from the source's at its seal
//! (quarantine). Both go under `.archive/<topic>-<partition>/` ([`crate::mirror`]).

use super::*;

impl Inner {
    /// The operator accepted `p`'s new lineage (`segmirror link reset-partition`): what the mirror holds of the old
    /// one is moved under `.archive/<topic>-<partition>/lineage-<old id>-<ms>/` (never deleted), its state files
    /// go, and the catalog records the new lineage with no segments, so the shipper's chunks from 0 install the new
    /// topic from its start. Files first, the catalog last: a crash in between repeats what is left at the next
    /// chunk (the lineage stays pending until the switch is recorded).
    pub(super) fn reset_lineage(&mut self, p: &PartitionRef) -> TailResult<()> {
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
    /// its state (the state file, retention and progress records, closed log, segment logs): the partition starts
    /// afresh at the next chunk.
    /// Returns where the files went (`None`: there were none). Idempotent: a crash part-way is finished by a rerun.
    pub(super) fn archive_partition(&mut self, p: &PartitionRef, label: &str) -> TailResult<Option<PathBuf>> {
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
            mirror::closed_log_file(&self.root, &name),
        ] {
            match fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(TailError::io(&path, e)),
            }
        }
        // The segments' logs describe the segments that went; a new lineage writes its own.
        let logs = mirror::segment_logs_dir(&self.root, &name);
        match fs::remove_dir_all(&logs) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(TailError::io(&logs, e)),
        }
        fsync_dir(&mirror::tail_dir(&self.root))?;
        self.states.remove(&name);
        self.indexes.remove(&name);
        Ok(moved)
    }

    /// The unsealed segment `s` names holds bytes its source does not (its seal's digest differs): they are moved out
    /// of the way, never deleted, and the segment starts again at byte 0, so the next session's Resume makes the
    /// shipper send it again from its start. A segment above sealed ones is cut as a source truncation is
    /// (archived, recorded in the catalog: `truncate`); the partition's only segment goes to
    /// `.archive/<topic>-<partition>/quarantine-<ms>/` with the partition's state, so the partition starts afresh.
    /// Says what was done.
    pub(super) fn quarantine_segment(&mut self, s: &PartitionState, p: &PartitionRef) -> TailResult<String> {
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
    pub(super) fn lineage_accepted(&mut self, p: &PartitionRef) -> TailResult<bool> {
        match &mut self.catalog {
            Some(catalog) => catalog.lineage_accepted(p),
            None => Ok(false),
        }
    }
}
