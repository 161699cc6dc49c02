//! [`PartitionWriter`]: one `<topic>-<partition>` directory, appended batch by
//! batch as a Kafka broker's `UnifiedLog.append` would, closed as a clean
//! shutdown (or left as a running broker has it).
//!
//! Per append, in Kafka's order: shallow validation (framing, CRC, offsets not
//! below the log end offset, batch not larger than a segment), leader-epoch
//! assignment, `maybeRoll`, the segment append with its offset/time index
//! entries, producer state, the transaction index, the map end offset. Rolling
//! seals the old segment (final time-index entry, indexes trimmed) and takes a
//! producer snapshot at the new base offset. Closing seals the active segment,
//! snapshots at the log end offset and writes `leader-epoch-checkpoint` and
//! `partition.metadata`.
//!
//! The writer is built to be fast: data goes through a large buffer straight to
//! the `.log`, index entries stay in memory until their segment is sealed, and
//! nothing is fsynced before [`PartitionWriter::close`], which syncs every file
//! once.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use super::epochs::LeaderEpochCache;
use super::producer_state::{DataBatch, ProducerState};
use super::WriterConfig;
use crate::batch::{parse_header, BatchHeader, ControlType};
use crate::checkpoint::EpochEntry;
use crate::control::{end_txn_marker_batch, parse_control_key, parse_end_txn_marker, EndTxnMarker};
use crate::dir::{segment_file_name, validate_topic_name, PartitionDirName, SegmentFileKind, PARTITION_METADATA_FILE};
use crate::durable::{fsync_dir, write_atomically};
use crate::error::{Defect, Error, ParseError, Result};
use crate::index::{OffsetIndexBuilder, TimeIndexBuilder};
use crate::legacy;
use crate::log::scan_frames;
use crate::partition_metadata::{PartitionMetadata, TopicId, Uuid};
use crate::record::{for_each_record, BatchBuilder, DeepLimits};
use crate::txn_index::{self, AbortedTxn, TxnTracker};

/// Bytes buffered in front of the active `.log`: 16 bulk batches per write
/// call, small enough to keep many writers open.
const LOG_WRITE_BUFFER: usize = 256 * 1024;

/// Where one append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    /// First offset of the batch (for a legacy wrapper, of its first inner message).
    pub first_offset: i64,
    pub last_offset: i64,
    /// Base offset of the segment that received the batch.
    pub segment_base_offset: i64,
    /// Byte position of the batch in that segment's `.log`.
    pub position: u64,
    pub size: u64,
    /// The append rolled a new segment first.
    pub rolled: bool,
}

/// What was written for one segment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SegmentSummary {
    pub base_offset: i64,
    /// Bytes of the `.log`.
    pub size: u64,
    pub batches: u64,
    /// Last offset of the last batch, `None` for an empty segment.
    pub last_offset: Option<i64>,
    pub offset_index_entries: usize,
    pub time_index_entries: usize,
    /// Entries of the `.txnindex` (the file exists only when this is > 0).
    pub aborted_transactions: usize,
    /// Left as the active segment of a running broker (preallocated indexes).
    pub running: bool,
}

/// Everything a caller needs to know about a closed partition, including what
/// the log-dir checkpoints must say about it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WrittenPartition {
    pub topic: String,
    pub partition: i32,
    pub dir: PathBuf,
    #[serde(serialize_with = "serialize_display")]
    pub topic_id: TopicId,
    pub log_start_offset: i64,
    /// Log end offset: the next offset to be written.
    pub log_end_offset: i64,
    /// First offset not known to be flushed: the log end offset after a clean
    /// shutdown, the active segment's base offset on a running broker.
    pub recovery_point: i64,
    /// All written data counts as replicated: the log end offset.
    pub high_watermark: i64,
    pub segments: Vec<SegmentSummary>,
    /// Offsets of the `.snapshot` files written.
    pub snapshots: Vec<i64>,
    #[serde(serialize_with = "serialize_epochs")]
    pub epochs: Vec<EpochEntry>,
    pub running: bool,
}

fn serialize_display<S: serde::Serializer, T: std::fmt::Display>(v: &T, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

fn serialize_epochs<S: serde::Serializer>(v: &[EpochEntry], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter().map(|e| (e.epoch, e.start_offset)))
}

impl WrittenPartition {
    /// First segment's base offset.
    pub fn first_segment_base_offset(&self) -> i64 {
        self.segments.first().map_or(self.log_start_offset, |s| s.base_offset)
    }

    /// Total bytes of `.log` data.
    pub fn log_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size).sum()
    }

    pub fn batches(&self) -> u64 {
        self.segments.iter().map(|s| s.batches).sum()
    }
}

/// The active segment: its `.log` open for appending, its indexes in memory.
#[derive(Debug)]
struct Segment {
    base_offset: i64,
    log_path: PathBuf,
    log: BufWriter<File>,
    size: u64,
    batches: u64,
    last_offset: Option<i64>,
    offset_index: OffsetIndexBuilder,
    time_index: TimeIndexBuilder,
    aborted: Vec<AbortedTxn>,
    /// `LogSegment.rollingBasedTimestamp`: max timestamp of the first append.
    rolling_based_timestamp: Option<i64>,
}

/// Writes one partition directory. See the module docs; call
/// [`PartitionWriter::close`] at the end (dropping the writer leaves the active
/// segment's indexes unwritten).
#[derive(Debug)]
pub struct PartitionWriter {
    dir: PathBuf,
    topic: String,
    partition: i32,
    topic_id: TopicId,
    config: WriterConfig,
    log_start_offset: i64,
    next_offset: i64,
    active: Segment,
    sealed: Vec<SegmentSummary>,
    producers: ProducerState,
    txns: TxnTracker,
    epochs: LeaderEpochCache,
    snapshots: Vec<i64>,
    /// Files written since creation, synced at close.
    written: Vec<PathBuf>,
}

pub(crate) fn invalid_input(path: &Path, message: String) -> Error {
    Error::io(path, io::Error::new(io::ErrorKind::InvalidInput, message))
}

impl PartitionWriter {
    /// Create `<log_dir>/<topic>-<partition>/` (which must not exist or be empty)
    /// with an empty first segment at `base_offset`, which is also the log start
    /// offset (a base offset above 0 is what retention leaves behind).
    pub fn create(
        log_dir: &Path,
        topic: &str,
        partition: i32,
        base_offset: i64,
        config: WriterConfig,
    ) -> Result<PartitionWriter> {
        let name = PartitionDirName::new(topic, partition);
        let dir = log_dir.join(name.dir_name());
        validate_topic_name(topic).map_err(|reason| Error::BadName {
            path: dir.clone(),
            reason,
        })?;
        if partition < 0 {
            return Err(Error::BadName {
                path: dir,
                reason: format!("partition {partition} is negative"),
            });
        }
        if base_offset < 0 {
            return Err(invalid_input(&dir, format!("base offset {base_offset} is negative")));
        }
        config.validate().map_err(|m| invalid_input(&dir, m))?;
        fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        if fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))?.next().is_some() {
            return Err(Error::io(
                &dir,
                io::Error::new(io::ErrorKind::AlreadyExists, "partition directory is not empty"),
            ));
        }
        let topic_id = match config.topic_id {
            Some(id) => id,
            None => Uuid::random().map_err(|e| Error::io(&dir, e))?,
        };
        let active = open_segment(&dir, base_offset, &config)?;
        Ok(PartitionWriter {
            written: vec![active.log_path.clone()],
            dir,
            topic: topic.to_string(),
            partition,
            topic_id,
            log_start_offset: base_offset,
            next_offset: base_offset,
            active,
            sealed: Vec::new(),
            producers: ProducerState::new(base_offset),
            txns: TxnTracker::new(),
            epochs: LeaderEpochCache::new(),
            snapshots: Vec::new(),
            config,
        })
    }

    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn partition(&self) -> i32 {
        self.partition
    }

    pub fn topic_id(&self) -> TopicId {
        self.topic_id
    }

    /// The log end offset: the offset the next batch gets by default.
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset
    }

    /// Base offset of the active segment.
    pub fn active_segment_base_offset(&self) -> i64 {
        self.active.base_offset
    }

    /// Producer state as it stands.
    pub fn producer_state(&self) -> &ProducerState {
        &self.producers
    }

    /// Move the log start offset forward, as `DeleteRecords` does (it lands in
    /// `log-start-offset-checkpoint`). Must stay within `[current, log end offset]`.
    pub fn advance_log_start_offset(&mut self, offset: i64) -> Result<()> {
        if offset < self.log_start_offset || offset > self.next_offset {
            return Err(invalid_input(
                &self.dir,
                format!(
                    "log start offset {offset} outside [{}, {}]",
                    self.log_start_offset, self.next_offset
                ),
            ));
        }
        self.log_start_offset = offset;
        Ok(())
    }

    /// Record that this broker became leader in `epoch` with nothing written
    /// in it yet (`Partition.makeLeader` assigns the epoch at the log end offset).
    pub fn become_leader(&mut self, epoch: i32) {
        self.epochs.assign(epoch, self.next_offset);
    }

    /// Append `batch` at the log end offset (its `base_offset` is overwritten).
    pub fn append(&mut self, batch: BatchBuilder) -> Result<AppendInfo> {
        let at = self.next_offset;
        self.append_at(at, batch)
    }

    /// Append `batch` at `base_offset`, which may leave a gap after the log end
    /// offset (as compaction does) but not go below it.
    pub fn append_at(&mut self, base_offset: i64, mut batch: BatchBuilder) -> Result<AppendInfo> {
        batch.base_offset = base_offset;
        self.append_raw(&batch.build())
    }

    /// Append a COMMIT or ABORT marker at the log end offset, built as
    /// `MemoryRecords.withEndTransactionMarker` does.
    pub fn append_end_txn_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        marker: EndTxnMarker,
        timestamp: i64,
        partition_leader_epoch: i32,
    ) -> Result<AppendInfo> {
        let bytes = end_txn_marker_batch(
            self.next_offset,
            timestamp,
            partition_leader_epoch,
            producer_id,
            producer_epoch,
            marker,
        );
        self.append_raw(&bytes)
    }

    fn log_error(&self, relative: u64, offset: Option<i64>, defect: Defect) -> Error {
        Error::corrupt(&self.active.log_path, self.active.size + relative, offset, defect)
    }

    /// Append one complete frame (a magic-2 batch or a legacy message/wrapper)
    /// with its offsets as they are. Refused (nothing written) when the frame is
    /// malformed or its CRC is wrong, when it starts below the log end offset,
    /// when it is larger than a segment, or when producer state forbids it.
    /// Error positions are where the frame would have been written. After an
    /// I/O error the writer's state is undefined: drop it.
    pub fn append_raw(&mut self, frame: &[u8]) -> Result<AppendInfo> {
        let parsed = match scan_frames(frame, 0).next() {
            Some(Ok(f)) => f,
            Some(Err(e)) => return Err(e.shifted(self.active.size).at(&self.active.log_path)),
            None => {
                return Err(ParseError::Incomplete {
                    position: 0,
                    offset: None,
                    needed: crate::batch::HEADER_SIZE_UP_TO_MAGIC as u64,
                    available: 0,
                }
                .shifted(self.active.size)
                .at(&self.active.log_path))
            }
        };
        let mut info = parsed.info;
        if parsed.bytes.len() != frame.len() {
            return Err(self.log_error(
                info.size,
                None,
                Defect::TrailingBytes {
                    bytes: (frame.len() - parsed.bytes.len()) as u64,
                },
            ));
        }
        if let Some(defect) = parsed.crc_defect() {
            return Err(self.log_error(parsed.crc_position(), Some(info.base_offset), defect));
        }
        let size = info.size;
        if size > self.config.segment_bytes {
            return Err(self.log_error(
                8,
                Some(info.base_offset),
                Defect::BadLength {
                    field: "batch size (exceeds segment.bytes)",
                    value: size as i64,
                },
            ));
        }
        // Kafka knows the first offset of v2 batches only; a legacy wrapper's is
        // found by decompressing, to refuse overlaps, but rolling uses what Kafka
        // uses (`lastOffset - Integer.MAX_VALUE`).
        let (first_offset, known_first) = if info.magic >= 2 {
            (info.base_offset, Some(info.base_offset))
        } else if info.records_count < 0 {
            let deep = legacy::deep_batch_info(frame, 0, &DeepLimits::default())
                .map_err(|e| e.shifted(self.active.size).at(&self.active.log_path))?;
            (deep.base_offset, None)
        } else {
            (info.base_offset, None)
        };
        if first_offset < self.next_offset {
            return Err(self.log_error(
                0,
                Some(first_offset),
                Defect::OffsetOutOfOrder {
                    previous: self.next_offset - 1,
                    found: first_offset,
                },
            ));
        }
        if info.last_offset < first_offset {
            return Err(self.log_error(
                23,
                Some(first_offset),
                Defect::BadLength {
                    field: "lastOffsetDelta",
                    value: info.last_offset.wrapping_sub(first_offset),
                },
            ));
        }
        let Some(next_offset) = info.last_offset.checked_add(1) else {
            return Err(self.log_error(
                0,
                Some(first_offset),
                Defect::OffsetOverflow {
                    base_offset: self.active.base_offset,
                    found: info.last_offset,
                },
            ));
        };
        let producer_update = if info.magic >= 2 {
            let header = parse_header(frame).map_err(|e| e.shifted(self.active.size).at(&self.active.log_path))?;
            let update = self.producer_update(frame, &header)?;
            if let ProducerUpdate::Marker { control_type, .. } = update {
                // The shallow scan decodes only uncompressed control batches.
                info.control = Some(control_type);
            }
            update
        } else {
            ProducerUpdate::None
        };

        if info.magic >= 2 {
            self.epochs.assign(info.partition_leader_epoch, info.base_offset);
        } else {
            self.epochs.clear();
        }
        let rolled = self.maybe_roll(size, info.last_offset, info.max_timestamp, known_first)?;

        let position = self.active.size;
        info.position = position;
        let index_error = |e: ParseError| e.at(&self.active.log_path);
        self.active.offset_index.push(&info).map_err(index_error)?;
        self.active.time_index.push(&info).map_err(index_error)?;
        self.active
            .log
            .write_all(frame)
            .map_err(|e| Error::io(&self.active.log_path, e))?;
        if position == 0 {
            self.active.rolling_based_timestamp = Some(info.max_timestamp);
        }
        self.active.size += size;
        self.active.batches += 1;
        self.active.last_offset = Some(info.last_offset);

        match producer_update {
            ProducerUpdate::None => {}
            ProducerUpdate::Touch(pid) => self.producers.touch(pid),
            ProducerUpdate::Data(d) => {
                // Checked by `producer_update` before anything was written.
                let _ = self.producers.append_data(&d);
            }
            ProducerUpdate::Marker {
                producer_id,
                producer_epoch,
                coordinator_epoch,
                timestamp,
                ..
            } => {
                self.producers
                    .append_marker(producer_id, producer_epoch, coordinator_epoch, timestamp);
            }
        }
        if let Some(aborted) = self.txns.on_batch(&info) {
            self.active.aborted.push(aborted);
        }
        self.next_offset = next_offset;
        self.producers.update_map_end_offset(self.next_offset);
        Ok(AppendInfo {
            first_offset,
            last_offset: info.last_offset,
            segment_base_offset: self.active.base_offset,
            position,
            size,
            rolled,
        })
    }

    /// What a magic-2 batch does to producer state, checked before anything is
    /// written (`analyzeAndValidateProducerState`).
    fn producer_update(&self, frame: &[u8], header: &BatchHeader) -> Result<ProducerUpdate> {
        if !header.has_producer_id() {
            return Ok(ProducerUpdate::None);
        }
        let pid = header.producer_id;
        if !header.is_control() {
            let d = DataBatch {
                producer_id: pid,
                producer_epoch: header.producer_epoch,
                last_seq: header.last_sequence(),
                base_offset: header.base_offset,
                last_offset: header.last_offset(),
                max_timestamp: header.max_timestamp,
                transactional: header.is_transactional(),
            };
            return match self.producers.check_data(&d) {
                Ok(()) => Ok(ProducerUpdate::Data(d)),
                Err(e) => Err(self.log_error(21, Some(header.base_offset), Defect::Other { message: e.to_string() })),
            };
        }
        // `ProducerAppendInfo.append`: the first record of a control batch is an
        // end-transaction marker; an empty control batch changes nothing.
        let mut first: Option<std::result::Result<(EndTxnMarker, i64), String>> = None;
        for_each_record(frame, header, &DeepLimits::default(), |r| {
            let decoded = parse_control_key(r.key).and_then(|t| match t {
                ControlType::Abort | ControlType::Commit => parse_end_txn_marker(t, r.value),
                ControlType::Other(id) => Err(format!("control record type {id} is not an end-transaction marker")),
            });
            first = Some(decoded.map(|m| (m, r.timestamp)));
            ControlFlow::Break(())
        })
        .map_err(|e| e.shifted(self.active.size).at(&self.active.log_path))?;
        match first {
            None => Ok(ProducerUpdate::Touch(pid)),
            Some(Ok((marker, timestamp))) => Ok(ProducerUpdate::Marker {
                producer_id: pid,
                producer_epoch: header.producer_epoch,
                coordinator_epoch: marker.coordinator_epoch,
                timestamp,
                control_type: marker.control_type,
            }),
            Some(Err(message)) => Err(self.log_error(
                crate::batch::RECORD_BATCH_OVERHEAD as u64,
                Some(header.base_offset),
                Defect::Control { message },
            )),
        }
    }

    /// `UnifiedLog.maybeRoll` + `LogSegment.shouldRoll`.
    fn maybe_roll(
        &mut self,
        size: u64,
        last_offset: i64,
        max_timestamp: i64,
        first_offset: Option<i64>,
    ) -> Result<bool> {
        let seg = &self.active;
        // `timeWaitedForRoll`: without a first-batch timestamp Kafka measures
        // wall-clock time since the segment was created, which is ~0 here.
        let waited = match seg.rolling_based_timestamp {
            Some(ts) if ts >= 0 => max_timestamp.saturating_sub(ts),
            _ => 0,
        };
        let relative = last_offset.checked_sub(seg.base_offset);
        let should_roll = seg.size > self.config.segment_bytes - size
            || (seg.size > 0 && waited > self.config.segment_ms)
            || seg.offset_index.entries().len() >= self.config.max_offset_index_entries()
            || seg.time_index.entries().len() + 1 >= self.config.max_time_index_entries()
            || !relative.is_some_and(|r| (0..=i64::from(i32::MAX)).contains(&r));
        if !should_roll {
            return Ok(false);
        }
        let roll_offset = first_offset.unwrap_or(last_offset.saturating_sub(i64::from(i32::MAX)));
        let new_base = roll_offset.max(self.next_offset);
        if new_base == self.active.base_offset && self.active.size == 0 {
            // KAFKA-6388: the empty active segment is replaced by an identical one.
            return Ok(false);
        }
        self.roll_to(new_base)?;
        Ok(true)
    }

    /// Roll a new segment at the log end offset (`UnifiedLog.roll()`); a no-op
    /// when the active segment is empty and already starts there.
    pub fn roll(&mut self) -> Result<()> {
        if self.active.size == 0 && self.active.base_offset == self.next_offset {
            return Ok(());
        }
        self.roll_to(self.next_offset)
    }

    /// `LocalLog.roll` + the producer snapshot of `UnifiedLog.roll`.
    fn roll_to(&mut self, new_base: i64) -> Result<()> {
        let next = open_segment(&self.dir, new_base, &self.config)?;
        self.written.push(next.log_path.clone());
        let old = std::mem::replace(&mut self.active, next);
        let summary = seal(&self.dir, &self.config, old, false, &mut self.written)?;
        self.sealed.push(summary);
        self.producers.update_map_end_offset(new_base);
        write_snapshot(&self.dir, &mut self.producers, &mut self.written, &mut self.snapshots)
    }

    /// Finish the partition: seal the active segment (or leave it running, per
    /// [`WriterConfig::running`]), take the log-end-offset snapshot of a clean
    /// shutdown, write `leader-epoch-checkpoint` and `partition.metadata`, and
    /// fsync everything once (if [`WriterConfig::fsync`]).
    pub fn close(self) -> Result<WrittenPartition> {
        let PartitionWriter {
            dir,
            topic,
            partition,
            topic_id,
            config,
            log_start_offset,
            next_offset,
            active,
            mut sealed,
            mut producers,
            epochs,
            mut snapshots,
            mut written,
            ..
        } = self;
        let running = config.running;
        let active_base = active.base_offset;
        sealed.push(seal(&dir, &config, active, running, &mut written)?);
        if !running {
            // `UnifiedLog.close`: snapshot at the log end offset.
            write_snapshot(&dir, &mut producers, &mut written, &mut snapshots)?;
        }
        if config.fsync {
            for path in &written {
                sync_file(path)?;
            }
        }
        let write_small = |path: &Path, bytes: &[u8]| -> Result<()> {
            if config.fsync {
                write_atomically(path, bytes)
            } else {
                fs::write(path, bytes).map_err(|e| Error::io(path, e))
            }
        };
        write_small(
            &crate::checkpoint::leader_epoch_checkpoint_path(&dir),
            epochs.to_checkpoint().encode().as_bytes(),
        )?;
        write_small(
            &dir.join(PARTITION_METADATA_FILE),
            PartitionMetadata::new(topic_id).encode().as_bytes(),
        )?;
        if config.fsync {
            fsync_dir(&dir)?;
        }
        Ok(WrittenPartition {
            topic,
            partition,
            dir,
            topic_id,
            log_start_offset,
            log_end_offset: next_offset,
            recovery_point: if running { active_base } else { next_offset },
            high_watermark: next_offset,
            segments: sealed,
            snapshots,
            epochs: epochs.entries().to_vec(),
            running,
        })
    }
}

/// `takeSnapshot`: written in place like Kafka (synced at close).
fn write_snapshot(
    dir: &Path,
    producers: &mut ProducerState,
    written: &mut Vec<PathBuf>,
    snapshots: &mut Vec<i64>,
) -> Result<()> {
    if let Some((offset, snapshot)) = producers.take_snapshot() {
        let path = dir.join(segment_file_name(offset, SegmentFileKind::Snapshot));
        fs::write(&path, snapshot.to_bytes()).map_err(|e| Error::io(&path, e))?;
        written.push(path);
        snapshots.push(offset);
    }
    Ok(())
}

/// Write a segment's indexes: trimmed with the final time-index entry
/// (`onBecomeInactiveSegment` / `close`), or, for a running broker's active
/// segment, preallocated to `segment.index.bytes` with a zero tail.
fn seal(
    dir: &Path,
    config: &WriterConfig,
    mut seg: Segment,
    running: bool,
    written: &mut Vec<PathBuf>,
) -> Result<SegmentSummary> {
    seg.log.flush().map_err(|e| Error::io(&seg.log_path, e))?;
    if !running {
        seg.time_index.seal();
    }
    let index_path = dir.join(segment_file_name(seg.base_offset, SegmentFileKind::Index));
    let time_path = dir.join(segment_file_name(seg.base_offset, SegmentFileKind::TimeIndex));
    let (index_len, time_len) = if running {
        (config.offset_index_file_bytes(), config.time_index_file_bytes())
    } else {
        (0, 0)
    };
    write_index(&index_path, &seg.offset_index.to_bytes(), index_len)?;
    write_index(&time_path, &seg.time_index.to_bytes(), time_len)?;
    written.push(index_path);
    written.push(time_path);
    if !seg.aborted.is_empty() {
        let path = dir.join(segment_file_name(seg.base_offset, SegmentFileKind::TxnIndex));
        fs::write(&path, txn_index::serialize(&seg.aborted)).map_err(|e| Error::io(&path, e))?;
        written.push(path);
    }
    Ok(SegmentSummary {
        base_offset: seg.base_offset,
        size: seg.size,
        batches: seg.batches,
        last_offset: seg.last_offset,
        offset_index_entries: seg.offset_index.entries().len(),
        time_index_entries: seg.time_index.entries().len(),
        aborted_transactions: seg.aborted.len(),
        running,
    })
}

/// How one magic-2 batch changes producer state.
#[derive(Debug, Clone, Copy)]
enum ProducerUpdate {
    /// No producer id.
    None,
    /// An empty control batch: the producer gets an (empty) entry if it had none.
    Touch(i64),
    Data(DataBatch),
    Marker {
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        timestamp: i64,
        control_type: ControlType,
    },
}

fn open_segment(dir: &Path, base_offset: i64, config: &WriterConfig) -> Result<Segment> {
    let log_path = dir.join(segment_file_name(base_offset, SegmentFileKind::Log));
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&log_path)
        .map_err(|e| Error::io(&log_path, e))?;
    Ok(Segment {
        base_offset,
        log_path,
        log: BufWriter::with_capacity(LOG_WRITE_BUFFER, file),
        size: 0,
        batches: 0,
        last_offset: None,
        offset_index: OffsetIndexBuilder::new(base_offset, config.index_interval_bytes),
        time_index: TimeIndexBuilder::new(base_offset, config.index_interval_bytes),
        aborted: Vec::new(),
        rolling_based_timestamp: None,
    })
}

/// Write index entries, then extend the file with zeros to `len` (a sparse
/// extension, as `RandomAccessFile.setLength` makes it) when `len` is larger.
fn write_index(path: &Path, entries: &[u8], len: u64) -> Result<()> {
    let mut file = File::create(path).map_err(|e| Error::io(path, e))?;
    file.write_all(entries).map_err(|e| Error::io(path, e))?;
    if len > entries.len() as u64 {
        file.set_len(len).map_err(|e| Error::io(path, e))?;
    }
    Ok(())
}

fn sync_file(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| Error::io(path, e))
}
