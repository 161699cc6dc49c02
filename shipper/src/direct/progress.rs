//! Where the source stands, told to the applier for lag reporting (`segmirror status`): a [`SourceProgress`] per
//! partition with the source's log end offset, its high watermark when known, the active segment's base and size,
//! this shipper's wall clock, and how far the feed has shipped (its position: read and handed to the session, in
//! flight or acknowledged; the session drops it on a link without feature bit 4).
//!
//! Why the feed computes it: the applier only knows what it installed, and only the shipper sees the source.
//! Why at most every [`PROGRESS_INTERVAL`] (`TailFeedConfig::progress_interval`) and only when it changed: it is read
//! by people and monitoring polling in seconds (a log-end feed whose high watermark moved reports within
//! [`HIGH_WATERMARK_REPORT_INTERVAL`], for what `segmirror serve` shows of its mirror); an unchanged figure tells the applier nothing new (the report's time is when the source was last seen
//! *that far*, which is what "seconds behind" needs). After a seek nothing counts as sent, so every session starts
//! with a fresh report. Advisory: a failure to compute one (a segment deleted under the listing) skips it, never
//! fails the feed.
//!
//! The log end offset is the next offset after the last complete, CRC-valid batch of the active segment, found by
//! scanning from the feed's own position when it is in the active segment (nothing, when it is caught up), else
//! from the active segment's start; at most [`MAX_PROGRESS_SCAN_BYTES`] per report, so a far-behind feed reports a
//! lower bound (the bytes lag is still exact: it comes from the size).
//!
//! [`PROGRESS_INTERVAL`]: segmirror_transport::direct::handshake::PROGRESS_INTERVAL

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use segmirror_transport::direct::payload::{Shipped, SourceProgress};
use segmirror_transport::direct::session::FeedItem;

use super::{PartState, TailFeedConfig};
use crate::source::bound_hw::UptoPolicy;
use crate::source::growing::{read_tail, TailOptions, TailPosition, TailRead};
use crate::source::read::{read_partition, PartitionRead};

#[cfg(test)]
#[path = "progress_tests.rs"]
mod tests;

/// Most bytes one report scans to find the log end: 4 MiB, one feed chunk's worth (`MAX_FEED_CHUNK_BYTES`); beyond
/// it the report gives a lower bound (the bytes lag stays exact). Why not more: the scan reads and CRC-checks what
/// it covers, once a second per partition. At 64 MiB (the earlier limit) a catching-up feed of 4 partitions read
/// and hashed 256 MiB a second for its reports alone: the direct catch-up's profile had the shipper's CRC-32C at
/// 12.5 % and its file reads at 20 % of its CPU, most of it these scans, more than the shipping itself. A feed that
/// is caught up scans nothing; one that is behind learns the exact end as it catches up.
pub const MAX_PROGRESS_SCAN_BYTES: u64 = 4 * 1024 * 1024;

/// The figures of a report that count as a change: log end, high watermark, active segment base and size. Not the
/// shipped position: it moves with every chunk, and a report per chunk would be noise; a report taken before the
/// step's chunk therefore shows the position before it until the next change, which `status` covers by never
/// showing less shipped than installed (whatever is installed was shipped).
type Figures = (i64, Option<i64>, i64, u64);

/// What was last reported for a partition in this session.
#[derive(Debug, Clone, Default)]
pub(super) struct Track {
    last: Option<(Instant, Figures)>,
    /// A step came before the interval since the last report was up, so the source may have moved unreported:
    /// when a report is due. The feed steps the partition then ([`super::wake`]), as nothing else may.
    owed: Option<Instant>,
}

impl Track {
    /// The high watermark last reported (`None`: no report yet).
    pub(super) fn high_watermark(&self) -> Option<Option<i64>> {
        self.last.as_ref().map(|(_, figures)| figures.1)
    }

    /// Whether a report may be owed by `now` (see `owed`).
    pub(super) fn owed_by(&self, now: Instant) -> bool {
        self.owed.is_some_and(|at| now >= at)
    }
}

/// How soon a log-end feed reports a high watermark that moved (50 ms): the applier records it and `segmirror serve`
/// serves a mirror fed above the high watermark only up to the one last reported, so this interval, not the
/// lag-reporting one, is what its readers wait for a committed record. A report is a small frame and a small file
/// rename on the applier, twenty a second per partition while its high watermark moves.
pub const HIGH_WATERMARK_REPORT_INTERVAL: Duration = Duration::from_millis(50);

/// The progress report due for `part` now, if any (blocking: runs on the step's thread).
pub(super) fn due(part: &mut PartState, config: &TailFeedConfig) -> Option<FeedItem> {
    let mut interval = config.progress_interval?;
    if let Some((_, (_, reported, _, _))) = &part.progress.last {
        let partition = &part.target.partition;
        let now = config
            .high_watermarks
            .high_watermark(&partition.topic, partition.partition)
            .map(|hw| hw.offset);
        if config.upto == UptoPolicy::LogEnd && now.is_some() && now != *reported {
            interval = interval.min(HIGH_WATERMARK_REPORT_INTERVAL);
        }
    }
    if let Some((at, _)) = &part.progress.last {
        if at.elapsed() < interval {
            part.progress.owed = Some(*at + interval);
            return None;
        }
    }
    part.progress.owed = None;
    let progress = match measure(part, config) {
        Ok(p) => p?,
        Err(reason) => {
            tracing::debug!(dir = %part.target.dir.display(), %reason, "no source progress this time");
            part.progress.owed = Some(Instant::now() + interval);
            return None;
        }
    };
    let key = (
        progress.log_end_offset,
        progress.high_watermark,
        progress.active_segment_base,
        progress.active_segment_size,
    );
    if part.progress.last.as_ref().is_some_and(|(_, last)| *last == key) {
        return None;
    }
    part.progress.last = Some((Instant::now(), key));
    Some(FeedItem::Progress(progress))
}

fn measure(part: &PartState, config: &TailFeedConfig) -> Result<Option<SourceProgress>, String> {
    let view = match read_partition(&part.target.dir).map_err(|e| e.to_string())? {
        PartitionRead::View(view) => view,
        PartitionRead::Refused(findings) => return Err(format!("{findings:?}")),
    };
    let Some(active) = view.segments.last() else {
        return Ok(None);
    };
    let base = active.base_offset();
    let size = std::fs::metadata(&active.files.log).map_err(|e| e.to_string())?.len();
    let from = match &part.at {
        Some(at) if at.base_offset == base => at.clone(),
        _ => TailPosition::start(&active.files.log, base).map_err(|e| e.to_string())?,
    };
    let options = TailOptions {
        upto: None,
        max_chunk_bytes: MAX_PROGRESS_SCAN_BYTES,
        ..TailOptions::default()
    };
    let log_end_offset = match read_tail(&from, &options).map_err(|e| e.to_string())? {
        TailRead::Appended { next, .. } => next.next_offset,
        other => return Err(format!("the active segment changed while scanned: {other:?}")),
    };
    // As fresh as the bound the step after this one uses (cheap when it is fresh already).
    config.high_watermarks.refresh();
    let high_watermark = config
        .high_watermarks
        .high_watermark(&part.target.partition.topic, part.target.partition.partition)
        .map(|hw| hw.offset);
    let shipper_time_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    Ok(Some(SourceProgress {
        partition: part.target.partition.clone(),
        log_end_offset,
        high_watermark,
        active_segment_base: base,
        active_segment_size: size,
        shipper_time_ms,
        shipped: match &part.at {
            Some(at) => Some(Shipped {
                segment_base: at.base_offset,
                position: at.position,
                end_offset: at.next_offset,
            }),
            // Not started, and the applier holds nothing of it (else the seek set a position): nothing shipped,
            // which starts at the source's first segment.
            None => view.segments.first().map(|first| Shipped {
                segment_base: first.base_offset(),
                position: 0,
                end_offset: first.base_offset(),
            }),
        },
    }))
}
