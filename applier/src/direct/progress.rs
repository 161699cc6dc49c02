//! The source's progress as the shipper last reported it ([`SourceProgress`]), kept where `segmirror status` reads
//! it without the applier running: `<mirror>/.tail/progress/<topic>-<partition>.json`.
//!
//! Advisory, so written atomically (a temporary file renamed over the old one: a reader sees the old or the new
//! report, never half of one) but never fsynced: a crash may lose the last reports, which the shipper sends again
//! within a second of the next session, and an fsync per report would put disk flushes beside the latency path for
//! nothing that affects correctness. A failure to record one is logged and ignored: it never stops replication.
//!
//! Besides the last report the file keeps, for "seconds behind", the points where the source's log end first
//! reached a new value (log end, when it was received) that the mirror had not installed yet: the first of them
//! beyond the installed end says since when the source has held a record the mirror lacks. Points the mirror has
//! installed are pruned at each report; at most [`MAX_PROGRESS_POINTS`] are kept (merging the oldest two, keeping
//! the earlier time, so the lag is never understated).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use segmirror_transport::direct::payload::{SourceProgress, TruncateMode};

use super::{tp_name, valid_topic};
use crate::mirror::{self, recorded_progress, RecordedProgress, RecordedShipped};

/// Most not-yet-installed log end points kept per partition (128: two minutes of one report a second at full
/// detail; beyond it the oldest coarsen, which can only overstate the lag).
pub const MAX_PROGRESS_POINTS: usize = 128;

/// The progress file of `topic`-`partition` under the mirror `root`.
pub fn progress_path(root: &Path, topic: &str, partition: i32) -> PathBuf {
    mirror::progress_file(root, &format!("{topic}-{partition}"))
}

/// Records `report` for its partition, sent by a shipper bounded by `upto`; `installed_end` is the offset after
/// the mirror's last durable record, if known (points at or below it are pruned). Blocking.
pub(super) fn record(
    root: &Path,
    report: &SourceProgress,
    installed_end: Option<i64>,
    upto: TruncateMode,
) -> Result<(), String> {
    let (topic, partition) = (&report.partition.topic, report.partition.partition);
    if !valid_topic(topic) {
        return Err(format!("{}: not a valid topic name", tp_name(&report.partition)));
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    // An unreadable old file is replaced: the report is what matters, the history only refines it.
    let mut points = recorded_progress(root, topic, partition)
        .ok()
        .flatten()
        .map(|p| p.points)
        .unwrap_or_default();
    if let Some(end) = installed_end {
        points.retain(|(log_end, _)| *log_end > end);
    }
    let new_end = installed_end.is_none_or(|end| report.log_end_offset > end);
    if new_end
        && points
            .last()
            .is_none_or(|(log_end, _)| report.log_end_offset > *log_end)
    {
        points.push((report.log_end_offset, now));
    }
    if points.len() > MAX_PROGRESS_POINTS {
        // Merge the oldest two: the second keeps the first's (earlier) time.
        let first_at = points[0].1;
        points.remove(0);
        points[0].1 = first_at;
    }
    let recorded = RecordedProgress {
        topic: topic.clone(),
        partition,
        log_end_offset: report.log_end_offset,
        high_watermark: report.high_watermark,
        active_segment_base: report.active_segment_base,
        active_segment_size: report.active_segment_size,
        shipper_time_ms: report.shipper_time_ms,
        received_at_ms: now,
        points,
        shipped: report.shipped.map(RecordedShipped::from),
        above_high_watermark: upto == TruncateMode::LogEnd,
    };
    let path = progress_path(root, topic, partition);
    let dir = path.parent().ok_or_else(|| format!("{}: no parent", path.display()))?;
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let bytes = serde_json::to_vec_pretty(&recorded).map_err(|e| e.to_string())?;
    let tmp = path.with_extension("json.tmp");
    fs::write(&tmp, &bytes).map_err(|e| format!("{}: {e}", tmp.display()))?;
    fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use segmirror_transport::direct::payload::{PartitionRef, Shipped};

    use super::*;

    fn report(log_end_offset: i64) -> SourceProgress {
        SourceProgress {
            partition: PartitionRef {
                topic: "orders".into(),
                partition: 3,
                topic_id: [7; 16],
            },
            log_end_offset,
            high_watermark: Some(log_end_offset - 1),
            active_segment_base: 100,
            active_segment_size: 4096,
            shipper_time_ms: 1,
            shipped: None,
        }
    }

    #[test]
    fn the_oldest_report_beyond_the_installed_end_says_since_when_the_mirror_is_behind() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(recorded_progress(root.path(), "orders", 3).unwrap(), None);
        record(root.path(), &report(120), Some(100), TruncateMode::HighWatermark).unwrap();
        let first = recorded_progress(root.path(), "orders", 3).unwrap().unwrap();
        assert_eq!(first.points, vec![(120, first.received_at_ms)]);
        record(root.path(), &report(150), Some(100), TruncateMode::HighWatermark).unwrap();
        let second = recorded_progress(root.path(), "orders", 3).unwrap().unwrap();
        assert_eq!((second.log_end_offset, second.high_watermark), (150, Some(149)));
        assert_eq!(second.points.len(), 2);
        // Behind since the first report while the mirror lacks offset 100..120, since the second beyond 120.
        assert_eq!(second.behind_since_ms(100), Some(first.received_at_ms));
        assert_eq!(second.behind_since_ms(130), Some(second.points[1].1));
        assert_eq!(second.behind_since_ms(150), None);
        // Installed up to 130: the first point is pruned, the second kept.
        record(root.path(), &report(150), Some(130), TruncateMode::HighWatermark).unwrap();
        let third = recorded_progress(root.path(), "orders", 3).unwrap().unwrap();
        assert_eq!(third.points, vec![second.points[1]]);
        assert!(!progress_path(root.path(), "orders", 3)
            .with_extension("json.tmp")
            .exists());
    }

    #[test]
    fn the_shipped_position_is_recorded_when_reported_and_absent_from_older_files() {
        let root = tempfile::tempdir().unwrap();
        record(root.path(), &report(120), Some(100), TruncateMode::HighWatermark).unwrap();
        assert_eq!(
            recorded_progress(root.path(), "orders", 3).unwrap().unwrap().shipped,
            None
        );
        let mut with = report(130);
        with.shipped = Some(Shipped {
            segment_base: 100,
            position: 2048,
            end_offset: 125,
        });
        record(root.path(), &with, Some(100), TruncateMode::LogEnd).unwrap();
        let p = recorded_progress(root.path(), "orders", 3).unwrap().unwrap();
        assert_eq!(
            p.shipped,
            Some(RecordedShipped {
                segment_base: 100,
                position: 2048,
                end_offset: 125
            })
        );
        assert!(p.above_high_watermark, "a log-end shipper's report says so");
        record(root.path(), &with, Some(100), TruncateMode::HighWatermark).unwrap();
        let p = recorded_progress(root.path(), "orders", 3).unwrap().unwrap();
        assert!(!p.above_high_watermark);
    }

    #[test]
    fn points_stay_bounded_and_never_understate_the_lag() {
        let root = tempfile::tempdir().unwrap();
        for end in 1..=(MAX_PROGRESS_POINTS as i64 + 10) {
            record(root.path(), &report(end), Some(0), TruncateMode::HighWatermark).unwrap();
        }
        let p = recorded_progress(root.path(), "orders", 3).unwrap().unwrap();
        assert_eq!(p.points.len(), MAX_PROGRESS_POINTS);
        let oldest = p.points[0].1;
        assert!(p.points.iter().all(|(_, at)| *at >= oldest));
        assert_eq!(p.behind_since_ms(0), Some(oldest));
    }

    #[test]
    fn a_file_of_another_partition_or_a_bad_topic_is_refused() {
        let root = tempfile::tempdir().unwrap();
        record(root.path(), &report(10), None, TruncateMode::HighWatermark).unwrap();
        let other = progress_path(root.path(), "orders", 4);
        fs::copy(progress_path(root.path(), "orders", 3), &other).unwrap();
        let err = recorded_progress(root.path(), "orders", 4).unwrap_err();
        assert!(err.contains("orders-3"), "{err}");
        let mut bad = report(10);
        bad.partition.topic = "../x".into();
        assert!(record(root.path(), &bad, None, TruncateMode::HighWatermark).is_err());
    }
}
