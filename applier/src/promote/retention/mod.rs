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
mod tests {
    use super::*;

    fn seg(base: i64, end: i64, ts: Option<i64>, bytes: u64) -> SegmentAge {
        SegmentAge {
            base_offset: base,
            end_offset: end,
            max_timestamp: ts,
            bytes,
        }
    }

    fn policy(ms: Option<i64>, bytes: Option<u64>, deletes: bool) -> TopicRetention {
        TopicRetention {
            retention_ms: ms,
            retention_bytes: bytes,
            deletes,
            source: String::new(),
        }
    }

    const NOW: i64 = 1_000_000;

    #[test]
    fn time_deletes_the_expired_prefix_only() {
        let segments = [
            seg(0, 10, Some(1000), 100),
            seg(10, 20, Some(NOW - 5000), 100),
            seg(20, 30, Some(2000), 100), // older again, but behind a kept segment: stays
            seg(30, 35, Some(NOW), 50),
        ];
        let doomed = predict(&policy(Some(10_000), None, true), &segments, NOW);
        assert_eq!(doomed.len(), 1);
        assert_eq!(
            (doomed[0].base_offset, doomed[0].reason),
            (0, DeleteReason::RetentionMs)
        );
        // Exactly at the limit stays (Kafka's test is strictly greater).
        assert!(predict(&policy(Some(NOW - 1000), None, true), &segments, NOW).is_empty());
        // Unlimited and compact-only keep everything.
        assert!(predict(&policy(None, None, true), &segments, NOW).is_empty());
        assert!(predict(&policy(Some(1), Some(0), false), &segments, NOW).is_empty());
    }

    #[test]
    fn everything_expired_goes_including_the_active_segment_but_not_an_empty_last_one() {
        let all = [seg(0, 10, Some(1), 100), seg(10, 20, Some(2), 100)];
        assert_eq!(predict(&policy(Some(10), None, true), &all, NOW).len(), 2);
        let empty_last = [seg(0, 10, Some(1), 100), seg(10, 10, None, 0)];
        assert_eq!(predict(&policy(Some(10), None, true), &empty_last, NOW).len(), 1);
        // No timestamp: dated by mtime (the copy), so it and everything after it stay.
        let undated = [seg(0, 10, None, 100), seg(10, 20, Some(1), 100)];
        assert!(predict(&policy(Some(10), None, true), &undated, NOW).is_empty());
    }

    #[test]
    fn size_deletes_while_the_log_stays_at_or_above_the_limit() {
        let segments = [
            seg(0, 10, Some(NOW), 100),
            seg(10, 20, Some(NOW), 100),
            seg(20, 30, Some(NOW), 100),
        ];
        let doomed = predict(&policy(None, Some(150), true), &segments, NOW);
        assert_eq!(doomed.len(), 1, "{doomed:?}");
        assert_eq!(doomed[0].reason, DeleteReason::RetentionBytes);
        assert_eq!(predict(&policy(None, Some(100), true), &segments, NOW).len(), 2);
        assert!(predict(&policy(None, Some(301), true), &segments, NOW).is_empty());
        // The longer prefix of the two passes wins.
        let mixed = [
            seg(0, 10, Some(1), 100),
            seg(10, 20, Some(2), 100),
            seg(20, 30, Some(NOW), 100),
        ];
        let doomed = predict(&policy(Some(10), Some(150), true), &mixed, NOW);
        let reasons: Vec<_> = doomed.iter().map(|d| d.reason).collect();
        assert_eq!(reasons, [DeleteReason::RetentionBytes, DeleteReason::RetentionMs]);
    }

    #[test]
    fn the_newest_timestamp_of_a_segment_comes_from_every_frame_that_has_one() {
        use segment_format::batch::TimestampType;
        use segment_format::legacy::encode_message;
        use segment_format::record::{BatchBuilder, RecordSpec};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        let frames = [
            encode_message(0, 0, 0, TimestampType::CreateTime, None, Some(b"v0")),
            encode_message(1, 1, 9_000, TimestampType::CreateTime, None, Some(b"v1")),
            BatchBuilder::new(2)
                .record(RecordSpec::new(0, 5_000).with_value("a"))
                .record(RecordSpec::new(1, 7_000).with_value("b"))
                .build(),
        ];
        std::fs::write(&path, frames.concat()).unwrap();
        assert_eq!(
            max_timestamp(&path, 0).unwrap(),
            (Some(9_000), frames.concat().len() as u64)
        );
        // Magic 0 only: no timestamp at all.
        std::fs::write(&path, &frames[0]).unwrap();
        assert_eq!(max_timestamp(&path, 0).unwrap().0, None);
        // A frame that does not fit the file is an error naming it.
        let mut cut = frames.concat();
        cut.truncate(cut.len() - 1);
        std::fs::write(&path, &cut).unwrap();
        let err = max_timestamp(&path, 0).unwrap_err().to_string();
        assert!(
            err.contains("00000000000000000000.log") && err.contains("does not fit"),
            "{err}"
        );
    }

    #[test]
    fn metadata_dir_follows_the_broker_config() {
        let log_dir = Path::new("/data/kafka");
        let mut props = BTreeMap::new();
        assert_eq!(metadata_dir(log_dir, &props), log_dir.join(METADATA_DIR));
        props.insert("log.dirs".to_string(), " /a , /b".to_string());
        assert_eq!(metadata_dir(log_dir, &props), Path::new("/a").join(METADATA_DIR));
        props.insert("metadata.log.dir".to_string(), "/meta".to_string());
        assert_eq!(metadata_dir(log_dir, &props), Path::new("/meta").join(METADATA_DIR));
    }

    #[test]
    fn a_segments_newest_timestamp_comes_from_its_indexes_and_the_batches_after_the_time_index_last_entry() {
        use segment_format::record::{BatchBuilder, RecordSpec};
        use segment_format::writer::{PartitionWriter, WriterConfig};
        const T0: i64 = 1_700_000_000_000;
        // (timestamps per batch, left running): the newest in the last batch of a live segment (no roll entry), the
        // newest early in a closed one, growing timestamps in a live one.
        let mut newest_last: Vec<i64> = (0..40).map(|i| T0 + i).collect();
        newest_last[39] = T0 + 90_000;
        let mut newest_early: Vec<i64> = (0..40).map(|i| T0 + i).collect();
        newest_early[2] = T0 + 50_000;
        let growing: Vec<i64> = (0..40).map(|i| T0 + i * 7).collect();
        for (timestamps, running) in [(newest_last, true), (newest_early, false), (growing, true)] {
            let root = tempfile::tempdir().unwrap();
            let config = WriterConfig {
                index_interval_bytes: 300,
                running,
                fsync: false,
                ..WriterConfig::default()
            };
            let mut w = PartitionWriter::create(root.path(), "ages", 0, 0, config).unwrap();
            w.become_leader(0);
            for &ts in &timestamps {
                let base = w.next_offset();
                w.append(BatchBuilder::new(base).record(RecordSpec::new(0, ts).with_value(vec![b'v'; 150])))
                    .unwrap();
            }
            let w = w.close().unwrap();
            let path = w.dir.join(segment_file_name(0, SegmentFileKind::Log));
            let walked = max_timestamp(&path, 0).unwrap();
            assert_eq!(walked.0, timestamps.iter().max().copied());
            let indexed = indexed_max_timestamp(&w.dir, 0, &path).unwrap();
            assert_eq!(indexed, Some(walked), "running {running}");
            assert_eq!(
                segment_ages(&w.dir, &[0], w.log_end_offset).unwrap()[0].max_timestamp,
                walked.0
            );

            // The indexed reading does not read the batches before the time index's last entry: a broken first frame
            // fails the walk, not it.
            let mut bytes = std::fs::read(&path).unwrap();
            bytes[8..12].copy_from_slice(&i32::MAX.to_be_bytes());
            std::fs::write(&path, &bytes).unwrap();
            assert!(max_timestamp(&path, 0).is_err());
            assert_eq!(
                indexed_max_timestamp(&w.dir, 0, &path).unwrap(),
                Some(walked),
                "running {running}"
            );
        }

        // An offset index that does not point at its batches, or no time index: the indexes cannot say.
        let root = tempfile::tempdir().unwrap();
        let config = WriterConfig {
            index_interval_bytes: 300,
            fsync: false,
            ..WriterConfig::default()
        };
        let mut w = PartitionWriter::create(root.path(), "ages", 0, 0, config).unwrap();
        w.become_leader(0);
        for i in 0..40 {
            let base = w.next_offset();
            w.append(BatchBuilder::new(base).record(RecordSpec::new(0, T0 + i).with_value(vec![b'v'; 150])))
                .unwrap();
        }
        let w = w.close().unwrap();
        let path = w.dir.join(segment_file_name(0, SegmentFileKind::Log));
        let index = w.dir.join(segment_file_name(0, SegmentFileKind::Index));
        let kept = std::fs::read(&index).unwrap();
        let mut entries = OffsetIndex::parse(&kept).entries;
        assert!(entries.len() > 5);
        for e in &mut entries {
            e.position += 1;
        }
        std::fs::write(&index, segment_format::index::serialize_offset_index(&entries)).unwrap();
        assert_eq!(indexed_max_timestamp(&w.dir, 0, &path).unwrap(), None);
        std::fs::write(&index, &kept).unwrap();
        assert!(indexed_max_timestamp(&w.dir, 0, &path).unwrap().is_some());
        let time_index = w.dir.join(segment_file_name(0, SegmentFileKind::TimeIndex));
        let mut torn = std::fs::read(&time_index).unwrap();
        torn.truncate(torn.len() - 3);
        std::fs::write(&time_index, torn).unwrap();
        assert_eq!(
            indexed_max_timestamp(&w.dir, 0, &path).unwrap(),
            None,
            "a torn time index"
        );
        std::fs::remove_file(w.dir.join(segment_file_name(0, SegmentFileKind::TimeIndex))).unwrap();
        assert_eq!(indexed_max_timestamp(&w.dir, 0, &path).unwrap(), None);
        assert_eq!(
            segment_ages(&w.dir, &[0], w.log_end_offset).unwrap()[0].max_timestamp,
            Some(T0 + 39)
        );
    }
}
