//! Appending chunks to the active segments (the module docs' durability order): each chunk checked against where
//! its partition stands and by the chunk rule (`crate::chunk_rule`) before anything is written, written, then the
//! group made durable and recorded at once (`commit`).

use super::*;
use crate::chunk_rule::{BatchDefect, ChunkDefect, ChunkRule, Floor, LegacyFrames};

impl Inner {
    /// Appends a group of chunks (the session's group commit): every chunk checked and written in order, then
    /// each file written to fsynced once (and its directory when the file is new), then each partition's state
    /// recorded once. On an error nothing more is recorded: bytes written and not recorded were never acknowledged,
    /// and are cut off by the next write to the segment or at the next session start.
    pub(super) fn apply_chunks(&mut self, chunks: &[Chunk]) -> TailResult<()> {
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
        self.tail_kill_point(TailStep::GroupSynced)?;
        for (name, w) in unsynced {
            self.record(name, w.state)?;
            self.tail_kill_point(TailStep::Recorded)?;
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
        let prev = unsynced
            .get(&name)
            .map(|w| w.state.clone())
            .or_else(|| self.states.get(&name).cloned());
        let start = self.chunk_start(chunk, &name, prev.as_ref())?;
        let (last_offset, batches) = validate_batches(chunk, &name, chunk.segment_base, start.floor_offset)?;
        if let Some(catalog) = &mut self.catalog {
            catalog.check_writable(p, Some(chunk.segment_base))?;
        }
        // The `.txnindex` entries and index entries the chunk adds, and the transactions open after it.
        // Continuing a chunk of this group: its open transactions are not recorded yet.
        let group_open = unsynced.get(&name).and_then(|w| w.state.open_transactions.clone());
        let mut companions = self.chunk_companions(&name, chunk, &batches, start.new_segment, group_open)?;

        // Only now is anything written.
        let pdir = self.partition_dir(&p.topic, p.partition);
        let path = self.log_path(&p.topic, p.partition, chunk.segment_base);
        if start.new_segment {
            self.begin_segment(chunk, &name, prev.as_ref(), start.passed_unsealed, unsynced)?;
        }
        write_at(&path, chunk)?;
        self.tail_kill_point(TailStep::ChunkWritten)?;
        // The `.txnindex` entries durable (a crash before the record: cut back at the next start), the index
        // entries written; the directory entry of a new file is made durable with the group (`commit`).
        self.write_chunk_companions(&pdir, chunk, &mut companions)?;
        self.tail_kill_point(TailStep::CompanionsWritten)?;
        let state = PartitionState {
            topic: p.topic.clone(),
            partition: p.partition,
            topic_id: p.topic_id,
            segment_base: chunk.segment_base,
            position: chunk.position + chunk.bytes.len() as u64,
            sealed: false,
            next_offset: Some(last_offset + 1),
            open_transactions: Some(companions.open.clone()),
            kept: Some(kept::after_chunk(
                prev.as_ref(),
                chunk,
                start.new_segment,
                &batches,
                companions.files(),
                Some(last_offset + 1),
                &companions.closed,
            )),
        };
        let created = chunk.position == 0 || unsynced.get(&name).is_some_and(|w| w.created);
        unsynced.insert(name.clone(), Unsynced1 { path, state, created });
        // Kept at the chunk's end so the group's next chunk of the partition continues them; should the group
        // fail, they are ahead of the record and the next chunk (at the recorded position) rebuilds them.
        self.keep_indexes(name, companions);
        Ok(())
    }

    /// Checks where `chunk` starts against `prev`, where its partition stands (recorded, or as the group's chunks
    /// before it left it).
    fn chunk_start(&self, chunk: &Chunk, name: &str, prev: Option<&PartitionState>) -> TailResult<ChunkStart> {
        let p = &chunk.partition;
        let order = |reason: String| TailError::OutOfOrder {
            partition: name.to_string(),
            segment: chunk.segment_base,
            position: chunk.position,
            reason,
        };
        let mut passed_unsealed = None;
        let (new_segment, floor_offset) = match prev {
            None => {
                if chunk.position != 0 {
                    return Err(order(
                        "nothing of the partition is durable, a first chunk must start at 0".into(),
                    ));
                }
                (true, None)
            }
            Some(s) => {
                if s.topic_id != p.topic_id {
                    return Err(TailError::LineageBreak {
                        partition: name.to_string(),
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
                    (false, floor)
                } else if chunk.segment_base > s.segment_base {
                    // The source deleted the unsealed segment (a LogStart at or above this chunk's segment came
                    // first): it will never be sealed and goes as retention deletes (`retention`, "The segment
                    // being tailed"). Otherwise a segment is left only once sealed.
                    let deleted_at_source = !s.sealed
                        && chunk.position == 0
                        && self.recorded_log_start(name)?.is_some_and(|l| l >= chunk.segment_base);
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
                    (true, None)
                } else {
                    return Err(order(format!("older than the durable segment {}", s.segment_base)));
                }
            }
        };
        Ok(ChunkStart {
            new_segment,
            floor_offset,
            passed_unsealed,
        })
    }

    /// The chunk starts a segment: what the group wrote before is recorded, the partition's directory checked (or
    /// made), and the segment claimed at 0 bytes before its file is created.
    fn begin_segment(
        &mut self,
        chunk: &Chunk,
        name: &str,
        prev: Option<&PartitionState>,
        passed_unsealed: Option<(i64, u64)>,
        unsynced: &mut Unsynced,
    ) -> TailResult<()> {
        let p = &chunk.partition;
        let pdir = self.partition_dir(&p.topic, p.partition);
        let path = self.log_path(&p.topic, p.partition, chunk.segment_base);
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
            return Err(self.foreign(&chunk.partition, name, &pdir)?);
        }
        if !pdir.exists() {
            fs::create_dir_all(&pdir).map_err(|e| TailError::io(&pdir, e))?;
            fsync_dir(&self.root)?;
        }
        if let Some((base, position)) = passed_unsealed {
            self.note_unsealed_deleted(name, base, position)?;
        }
        // Claim the new segment at 0 bytes before creating it: a crash after the create leaves a file the
        // record owns (truncated back to 0 at restart), never an unclaimed one refused above.
        let next_offset = prev.and_then(|s| s.next_offset);
        let claim = PartitionState {
            topic: p.topic.clone(),
            partition: p.partition,
            topic_id: p.topic_id,
            segment_base: chunk.segment_base,
            position: 0,
            sealed: false,
            next_offset,
            // The epoch history carries over; the new segment's files start empty.
            kept: kept::at_claim(prev, chunk.segment_base, next_offset),
            open_transactions: Some(
                self.states
                    .get(name)
                    .and_then(|s| s.open_transactions.clone())
                    .unwrap_or_default(),
            ),
        };
        self.record(name.to_string(), claim)?;
        if passed_unsealed.is_some() {
            // The claim moved past it: the sweep deletes it now (a crash from here on: at session start).
            self.sweep_partition(name)?;
        }
        Ok(())
    }

    /// The refusal of a partition whose directory holds a `.log` the record does not claim.
    fn foreign(&self, p: &PartitionRef, name: &str, pdir: &Path) -> TailResult<TailError> {
        // Installed by `apply` for another link than this applier's: say so (`handover`).
        let others = match &self.catalog {
            Some(catalog) => catalog.other_links(&p.topic, p.partition)?,
            None => Vec::new(),
        };
        if let (false, Some(catalog)) = (others.is_empty(), &self.catalog) {
            return Ok(TailError::Foreign {
                partition: name.to_string(),
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
        Ok(TailError::Foreign {
            partition: name.to_string(),
            reason: format!(
                "{} already holds segments the tail appender did not write",
                pdir.display()
            ),
            of: p.clone(),
        })
    }

    pub(super) fn check_applied(&mut self, chunk: &Chunk) -> TailResult<()> {
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
}

/// The steps of appending a group a crash test can stop after (the applier's failpoints).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TailStep {
    ChunkWritten,
    CompanionsWritten,
    GroupSynced,
    Recorded,
}

impl Inner {
    /// Stops here when a crash test armed this step's kill point.
    fn tail_kill_point(&self, step: TailStep) -> TailResult<()> {
        #[cfg(feature = "failpoints")]
        {
            use crate::failpoint::FailPoint;
            let point = match step {
                TailStep::ChunkWritten => FailPoint::TailChunkWritten,
                TailStep::CompanionsWritten => FailPoint::TailCompanionsWritten,
                TailStep::GroupSynced => FailPoint::TailGroupSynced,
                TailStep::Recorded => FailPoint::TailRecorded,
            };
            crate::failpoint::hit(self.failpoint.as_deref(), point).map_err(|i| TailError::Injected(i.0))?;
        }
        #[cfg(not(feature = "failpoints"))]
        let _ = step;
        Ok(())
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

/// Where a chunk starts in its partition (`Inner::chunk_start`).
struct ChunkStart {
    /// The chunk starts a segment (claimed before its file is created).
    new_segment: bool,
    /// The offset its first batch must carry at least; `None`: any offset at or above the segment base.
    floor_offset: Option<i64>,
    /// The unsealed segment the chunk passes over, deleted by the source's retention: (base, durable bytes).
    passed_unsealed: Option<(i64, u64)>,
}

/// Writes `chunk` at its position of the `.log` at `path`, not yet durable (`Inner::commit` makes it so).
fn write_at(path: &Path, chunk: &Chunk) -> TailResult<()> {
    // Only a segment at 0 may be created; a missing file with recorded bytes is lost data, never zero-filled.
    let mut file = OpenOptions::new()
        .write(true)
        .create(chunk.position == 0)
        .truncate(false)
        .open(path)
        .map_err(|e| TailError::io(path, e))?;
    let len = file.metadata().map_err(|e| TailError::io(path, e))?.len();
    if len < chunk.position {
        return Err(TailError::BadState {
            path: path.to_path_buf(),
            reason: format!(
                "{len} bytes on disk, but {} were recorded durable: lost data",
                chunk.position
            ),
        });
    }
    // Bytes beyond the record were never acknowledged (a failed earlier attempt).
    file.set_len(chunk.position).map_err(|e| TailError::io(path, e))?;
    file.seek(SeekFrom::Start(chunk.position))
        .map_err(|e| TailError::io(path, e))?;
    file.write_all(&chunk.bytes).map_err(|e| TailError::io(path, e))?;
    write_behind(&file, chunk.position, chunk.bytes.len() as u64);
    Ok(())
}
