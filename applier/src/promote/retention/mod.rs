//! Retention at promotion: which promoted data the target broker would delete as soon as it starts.
//!
//! Why: promoted segments keep the source's record timestamps. A target topic whose `retention.ms` is shorter than
//! the data's age (or whose `retention.bytes` is smaller than the mirror) deletes those segments at the broker's
//! first retention check, seconds after start, with no word to anyone. So promotion predicts it, refuses, and
//! proceeds only when told to (`--allow-retention-delete`), saying in the report what will go.
//!
//! # Where the target's settings come from
//! The target broker is stopped, so its KRaft metadata log on disk (`<metadata.log.dir>/__cluster_metadata-0`, by
//! default in the first log dir) gives the topic's config overrides and the dynamic broker configs
//! ([`segment_format::metadata_log`]). Static broker settings live in the broker's `server.properties`
//! (`--target-config`); without it Kafka's defaults are assumed. Precedence, as Kafka's `LogConfig` and
//! `DynamicBrokerConfig` apply it: the topic's `retention.ms` > the broker's `log.retention.ms` >
//! `log.retention.minutes` > `log.retention.hours` (default 168), where each broker key is looked up in the
//! broker's own dynamic config, then the cluster-wide dynamic default, then `server.properties`; a negative value
//! means unlimited. Likewise `retention.bytes` > `log.retention.bytes` (default -1), and `cleanup.policy` >
//! `log.cleanup.policy` (default `delete`): a policy without `delete` (compaction only) deletes nothing by age or
//! size.
//!
//! # The prediction (Kafka's `UnifiedLog.deleteOldSegments`, with the high watermark at the log end as promotion
//! writes it)
//! - By time: from the oldest segment on, while `now - segment.largestTimestamp > retention.ms`. The largest
//!   timestamp is the newest batch `maxTimestamp` in the segment (what the segment's time index ends with for a
//!   sealed segment); a segment without timestamps is dated by its file's mtime, which the copy makes "now", so
//!   it stops the prefix. The active segment goes too (the broker rolls a new, empty one first).
//! - By size: when the log is at least `retention.bytes`, from the oldest segment on while the log stays at or
//!   above `retention.bytes` without it.
//! - The broker runs the size pass, then the time pass: what goes is the longer of the two prefixes.
//!
//! Tiered storage (`remote.storage.enable`) changes which retention applies locally; promotion does not support it
//! and the prediction ignores it.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use segment_format::batch::{HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MAGIC_OFFSET, RECORD_BATCH_OVERHEAD};
use segment_format::checkpoint::MetaProperties;
use segment_format::dir::{segment_file_name, SegmentFileKind, META_PROPERTIES_FILE};
use segment_format::error::{Defect, Error as FormatError};
use segment_format::index::{read_index_file, OffsetIndex, TimeIndex};
use segment_format::log::LogFile;
use segment_format::metadata_log::{read_metadata_dir, read_server_properties, ClusterMetadata, METADATA_DIR};

pub mod loss;

use super::error::{Error, Result};
use super::frames::indexed_start;
pub use loss::{Age, DeleteReason, DoomedSegment, RetentionLoss, SegmentAge, TopicRetention};

/// Kafka's default `log.retention.hours` (7 days) when nothing sets a retention.
pub const DEFAULT_RETENTION_HOURS: i64 = 168;
/// Kafka's default `log.cleanup.policy`.
pub const DEFAULT_CLEANUP_POLICY: &str = "delete";
const MS_PER_MINUTE: i64 = 60_000;
const MS_PER_HOUR: i64 = 3_600_000;
/// Byte position of `maxTimestamp` in a magic-2 batch (`DefaultRecordBatch.MAX_TIMESTAMP_OFFSET`).
const MAX_TIMESTAMP_OFFSET: usize = 35;
/// Byte position of the timestamp of a magic-1 message (offset, size, crc, magic, attributes come first).
const MAGIC_1_TIMESTAMP_OFFSET: usize = 18;

/// The target broker's settings that decide retention, read once per promotion.
#[derive(Debug)]
pub struct TargetSettings {
    /// The metadata log read.
    pub metadata_dir: PathBuf,
    metadata: ClusterMetadata,
    /// `server.properties` (empty without `--target-config`).
    static_props: BTreeMap<String, String>,
    node_id: Option<i32>,
}

/// Why the target could not say what retention applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unknown {
    /// The metadata log could not be read (path, reason).
    Metadata(PathBuf, String),
    /// The metadata log has no such topic.
    NoTopic(PathBuf),
    /// A value is not a number (key, value, where).
    BadValue(String, String, String),
}

impl fmt::Display for Unknown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unknown::Metadata(path, reason) => {
                write!(f, "cannot read the target's metadata log {}: {reason}", path.display())
            }
            Unknown::NoTopic(path) => write!(f, "the target's metadata log {} has no such topic", path.display()),
            Unknown::BadValue(key, value, at) => write!(f, "{key}={value:?} ({at}) is not a number"),
        }
    }
}

/// Where the metadata log of the broker owning `log_dir` lives: `metadata.log.dir`, else the first of `log.dirs`
/// (or `log.dir`), else `log_dir` itself.
pub fn metadata_dir(log_dir: &Path, static_props: &BTreeMap<String, String>) -> PathBuf {
    let configured = static_props
        .get("metadata.log.dir")
        .or_else(|| static_props.get("log.dirs"))
        .or_else(|| static_props.get("log.dir"))
        .and_then(|v| v.split(',').map(str::trim).find(|d| !d.is_empty()))
        .map(PathBuf::from);
    configured.unwrap_or_else(|| log_dir.to_path_buf()).join(METADATA_DIR)
}

impl TargetSettings {
    /// Read the target's settings; `Err(Unknown)` when its metadata log cannot be read (promotion then refuses,
    /// unless told to go on). An unreadable `--target-config` is an error: the operator named it.
    pub fn load(log_dir: &Path, target_config: Option<&Path>) -> Result<std::result::Result<Self, Unknown>> {
        let static_props = match target_config {
            Some(path) => read_server_properties(path)?,
            None => BTreeMap::new(),
        };
        let metadata_dir = metadata_dir(log_dir, &static_props);
        let metadata = match read_metadata_dir(&metadata_dir) {
            Ok(m) => m,
            Err(e) => return Ok(Err(Unknown::Metadata(metadata_dir, e.to_string()))),
        };
        let meta = log_dir.join(META_PROPERTIES_FILE);
        let node_id = MetaProperties::read(&meta).ok().and_then(|m| m.node_id);
        Ok(Ok(TargetSettings {
            metadata_dir,
            metadata,
            static_props,
            node_id,
        }))
    }

    /// The topic's id in the target's metadata, if the topic exists there.
    pub fn topic_id(&self, topic: &str) -> Option<String> {
        self.metadata.topic(topic).map(|t| t.topic_id.to_string())
    }

    /// A broker-level key: this broker's dynamic config, the cluster-wide dynamic default, `server.properties`.
    fn broker(&self, key: &str) -> Option<(String, &'static str)> {
        if let Some(v) = self.node_id.and_then(|n| {
            self.metadata
                .broker_configs
                .get(&n.to_string())
                .and_then(|c| c.get(key))
        }) {
            return Some((v.clone(), "dynamic config of this broker"));
        }
        if let Some(v) = self.metadata.broker_configs.get("").and_then(|c| c.get(key)) {
            return Some((v.clone(), "dynamic cluster-wide default"));
        }
        self.static_props
            .get(key)
            .map(|v| (v.trim().to_string(), "server.properties"))
    }

    /// The retention of `topic` on the target.
    pub fn retention(&self, topic: &str) -> std::result::Result<TopicRetention, Unknown> {
        let Some(t) = self.metadata.topic(topic) else {
            return Err(Unknown::NoTopic(self.metadata_dir.clone()));
        };
        let number = |key: &str, value: &str, at: &str| {
            value
                .trim()
                .parse::<i64>()
                .map_err(|_| Unknown::BadValue(key.to_string(), value.to_string(), at.to_string()))
        };
        let (retention_ms, ms_source) = if let Some(v) = t.configs.get("retention.ms") {
            (
                number("retention.ms", v, "topic config")?,
                format!("retention.ms={v} (topic config)"),
            )
        } else if let Some((v, at)) = self.broker("log.retention.ms") {
            (
                number("log.retention.ms", &v, at)?,
                format!("log.retention.ms={v} ({at})"),
            )
        } else if let Some((v, at)) = self.broker("log.retention.minutes") {
            let m = number("log.retention.minutes", &v, at)?;
            (
                m.saturating_mul(MS_PER_MINUTE),
                format!("log.retention.minutes={v} ({at})"),
            )
        } else if let Some((v, at)) = self.broker("log.retention.hours") {
            let h = number("log.retention.hours", &v, at)?;
            (h.saturating_mul(MS_PER_HOUR), format!("log.retention.hours={v} ({at})"))
        } else {
            (
                DEFAULT_RETENTION_HOURS * MS_PER_HOUR,
                format!("log.retention.hours={DEFAULT_RETENTION_HOURS} (Kafka's default)"),
            )
        };
        let (retention_bytes, bytes_source) = if let Some(v) = t.configs.get("retention.bytes") {
            (
                number("retention.bytes", v, "topic config")?,
                format!("retention.bytes={v} (topic config)"),
            )
        } else if let Some((v, at)) = self.broker("log.retention.bytes") {
            (
                number("log.retention.bytes", &v, at)?,
                format!("log.retention.bytes={v} ({at})"),
            )
        } else {
            (-1, "log.retention.bytes=-1 (Kafka's default)".to_string())
        };
        let (policy, policy_source) = if let Some(v) = t.configs.get("cleanup.policy") {
            (v.clone(), "topic config")
        } else if let Some((v, at)) = self.broker("log.cleanup.policy") {
            (v, at)
        } else {
            (DEFAULT_CLEANUP_POLICY.to_string(), "Kafka's default")
        };
        let deletes = policy
            .split(',')
            .any(|p| p.trim().eq_ignore_ascii_case(DEFAULT_CLEANUP_POLICY));
        Ok(TopicRetention {
            retention_ms: (retention_ms >= 0).then_some(retention_ms),
            retention_bytes: u64::try_from(retention_bytes).ok(),
            deletes,
            source: format!("{ms_source}, {bytes_source}, cleanup.policy={policy} ({policy_source})"),
        })
    }
}

/// The prefix of `segments` the target would delete under `retention` at `now_ms` (Kafka's order: size, then time).
pub fn predict(retention: &TopicRetention, segments: &[SegmentAge], now_ms: i64) -> Vec<DoomedSegment> {
    if !retention.deletes {
        return Vec::new();
    }
    let deletable = |s: &SegmentAge, i: usize| !(i + 1 == segments.len() && s.bytes == 0);
    let mut by_size = 0;
    if let Some(limit) = retention.retention_bytes {
        let total: u64 = segments.iter().map(|s| s.bytes).sum();
        if total >= limit {
            let mut diff = total - limit;
            for (i, s) in segments.iter().enumerate() {
                if diff < s.bytes || !deletable(s, i) {
                    break;
                }
                diff -= s.bytes;
                by_size = i + 1;
            }
        }
    }
    let mut by_time = 0;
    if let Some(ms) = retention.retention_ms {
        for (i, s) in segments.iter().enumerate() {
            let expired = s.max_timestamp.is_some_and(|t| now_ms.saturating_sub(t) > ms);
            if !expired || !deletable(s, i) {
                break;
            }
            by_time = i + 1;
        }
    }
    // After the size pass deleted its prefix, the time pass starts on what is left: the segments are the same, so
    // it deletes `by_time` segments from the start when that is longer.
    segments
        .iter()
        .take(by_size.max(by_time))
        .enumerate()
        .map(|(i, s)| DoomedSegment {
            base_offset: s.base_offset,
            end_offset: s.end_offset,
            max_timestamp: s.max_timestamp,
            bytes: s.bytes,
            reason: if i < by_size {
                DeleteReason::RetentionBytes
            } else {
                DeleteReason::RetentionMs
            },
        })
        .collect()
}

/// The segments of a mirror partition (`bases` ascending, ending at `log_end_offset`), with their ages and sizes,
/// read from the batch headers only.
pub fn segment_ages(dir: &Path, bases: &[i64], log_end_offset: i64) -> Result<Vec<SegmentAge>> {
    bases
        .iter()
        .enumerate()
        .map(|(i, base)| {
            let path = dir.join(segment_file_name(*base, SegmentFileKind::Log));
            let (max_timestamp, bytes) = match indexed_max_timestamp(dir, *base, &path)? {
                Some(found) => found,
                None => max_timestamp(&path, 0)?,
            };
            Ok(SegmentAge {
                base_offset: *base,
                end_offset: bases.get(i + 1).copied().unwrap_or(log_end_offset),
                max_timestamp,
                bytes,
            })
        })
        .collect()
}

/// The newest timestamp of segment `base`'s `.log` at `path`, and its size, from its indexes as the broker finds it
/// (`LogSegment.maxTimestampSoFar` starts from the time index's last entry): the time index's last entry, and the
/// batches from the one holding that entry's offset to the end (located through the offset index's entry at or
/// below it; typically the last `index.interval.bytes` and a batch). Every time-index entry is the largest
/// timestamp up to its batch (checked against the batches at install), so nothing before that batch is newer.
/// `None` when the indexes cannot say (missing, no time entry, an offset entry not at the batch holding its
/// offset): the caller walks every header. Why: that walk reads a page per batch, from a cold cache a random read
/// per batch — 20 s for 4 GiB here, the whole failover install step.
fn indexed_max_timestamp(dir: &Path, base: i64, path: &Path) -> Result<Option<(Option<i64>, u64)>> {
    let read = |kind| read_index_file(&dir.join(segment_file_name(base, kind))).ok();
    let (Some(offsets), Some(times)) = (read(SegmentFileKind::Index), read(SegmentFileKind::TimeIndex)) else {
        return Ok(None);
    };
    let times = TimeIndex::parse(&times);
    // A partial slot is a torn write (a tailed segment's indexes are kept without fsync): not trusted.
    if times.layout.partial_bytes != 0 {
        return Ok(None);
    }
    let Some(last) = times.entries.last().copied() else {
        return Ok(None);
    };
    let log = LogFile::open(path)?;
    let Some(start) = indexed_start(&log, base, &OffsetIndex::parse(&offsets).entries, last.offset(base)) else {
        return Ok(None);
    };
    let (tail, size) = max_timestamp(path, start)?;
    let newest = tail.map_or(last.timestamp, |t| t.max(last.timestamp));
    Ok(Some(((newest >= 0).then_some(newest), size)))
}

/// The newest timestamp of a `.log` from `start` (a frame boundary) on: magic-2 batches' `maxTimestamp`, magic-1
/// messages' timestamp (magic 0 has none), and the file's size. One header read per frame.
fn max_timestamp(path: &Path, start: u64) -> Result<(Option<i64>, u64)> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let size = file.metadata().map_err(|e| Error::io(path, e))?.len();
    let corrupt = |position: u64, message: String| {
        Error::Format(FormatError::corrupt(path, position, None, Defect::Other { message }))
    };
    let mut header = [0u8; RECORD_BATCH_OVERHEAD];
    let mut position = start;
    let mut newest: Option<i64> = None;
    while position < size {
        let left = size - position;
        if left < HEADER_SIZE_UP_TO_MAGIC as u64 {
            return Err(corrupt(
                position,
                format!("{left} byte(s) left, less than a frame header"),
            ));
        }
        let want = (RECORD_BATCH_OVERHEAD as u64).min(left) as usize;
        let buf = header.get_mut(..want).unwrap_or_default();
        file.read_exact_at(buf, position).map_err(|e| Error::io(path, e))?;
        let length = buf
            .get(8..LOG_OVERHEAD)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(i32::from_be_bytes)
            .unwrap_or(-1);
        let frame = u64::try_from(length).map(|l| l + LOG_OVERHEAD as u64).unwrap_or(0);
        if frame <= LOG_OVERHEAD as u64 || frame > left {
            return Err(corrupt(
                position,
                format!("frame length {length} does not fit the file"),
            ));
        }
        if buf.get(MAGIC_OFFSET).copied() == Some(1) {
            // A magic-1 message (or compressed wrapper, whose timestamp is its newest inner one) carries its
            // timestamp right after its attributes.
            let ts = buf
                .get(MAGIC_1_TIMESTAMP_OFFSET..MAGIC_1_TIMESTAMP_OFFSET + 8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map_or(-1, i64::from_be_bytes);
            if ts >= 0 {
                newest = Some(newest.map_or(ts, |n| n.max(ts)));
            }
        } else if buf.get(MAGIC_OFFSET).copied() == Some(2) {
            if frame < RECORD_BATCH_OVERHEAD as u64 {
                return Err(corrupt(
                    position,
                    format!("batch length {length} is below the batch header's"),
                ));
            }
            let max = buf
                .get(MAX_TIMESTAMP_OFFSET..MAX_TIMESTAMP_OFFSET + 8)
                .and_then(|b| <[u8; 8]>::try_from(b).ok())
                .map_or(-1, i64::from_be_bytes);
            if max >= 0 {
                newest = Some(newest.map_or(max, |n| n.max(max)));
            }
        }
        position += frame;
    }
    Ok((newest, size))
}

#[cfg(test)]
mod tests;
