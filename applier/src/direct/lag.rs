//! The direct path's replication lag as `segmirror status`, the failover's checks and the admin server show it:
//! per tailed partition of a mirror root, the source's log end as the shipper last reported it
//! ([`RecordedProgress`](crate::mirror::RecordedProgress)), what the mirror holds durable (the state file, else the
//! catalog's installed end), and the lag between them in offsets, bytes and seconds.
//!
//! Read from the mirror's records only, so it works with the applier stopped: that is when a lag matters most.
//! The figures are as fresh as the last report (one a second while a shipper is connected); the report's age is
//! shown beside them.
//!
//! A figure that is not known is absent, never 0: while the partition's link (or the partition) is not moving data
//! (paused, promoted, deleted) no session runs and no report comes, so the source may grow without the mirror
//! hearing of it; the lag is then unknown and `lag_unknown` says why, while the last report's own figures (source
//! end, high watermark, shipped, with their age) are still shown as what they are.

use std::collections::HashMap;
use std::path::Path;

use segmirror_catalog::{LinkStatus, PartitionStatus, Status};
use segmirror_transport::direct::payload::PartitionRef;
use serde::Serialize;

use super::recorded_active_segment;
use crate::mirror::{recorded_claim, recorded_progress, tailed_partitions};

/// One tailed partition's lag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TailLag {
    pub topic: String,
    pub partition: i32,
    /// The source's log end offset as last reported; `None` before the first report.
    pub source_log_end_offset: Option<i64>,
    pub source_high_watermark: Option<i64>,
    /// When the applier received the last report (ms since the epoch).
    pub source_seen_at_ms: Option<u64>,
    /// The offset after the last record the shipper sent, as last reported and at least `installed_end_offset`
    /// (whatever is installed was shipped; a report taken just before a chunk went out shows less).
    pub shipped_end_offset: Option<i64>,
    /// The offset after the mirror's last durable record.
    pub installed_end_offset: Option<i64>,
    pub lag_offsets: Option<i64>,
    pub lag_bytes: Option<u64>,
    pub lag_seconds: Option<u64>,
    /// With several shippers (`apply --cluster`): the source node whose shipper holds the partition's claim.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim_node: Option<i32>,
    /// The leader epoch that claim was granted at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim_epoch: Option<i32>,
    /// Why the lag figures are absent although a report was received: the link or partition moves no data, so no
    /// report tells how far the source has grown since.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag_unknown: Option<String>,
    /// Why a figure is missing, when a file could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// Why no report reaches the applier for `topic`-`partition`, when its catalog record says it moves no data: its
/// link (the one recording the partition, else the catalog's only link) is not active, or the partition is not
/// mirroring. `None`: reports may come.
fn not_reported(status: &Status, recorded: &[Recorded<'_>]) -> Option<String> {
    use segmirror_catalog::{LinkState, PartitionState};
    let recorded = recorded.first().map(|(l, p)| (*l, Some(*p)));
    let (link, p) = match (recorded, &status.links[..]) {
        (Some(found), _) => found,
        (None, [only]) => (only, None),
        (None, _) => return None,
    };
    if link.state != LinkState::Active {
        return Some(format!(
            "link {:?} is {}: no session, so no report of the source's end",
            link.name, link.state
        ));
    }
    match p.map(|p| p.state) {
        Some(state @ (PartitionState::Paused | PartitionState::Promoted)) => {
            Some(format!("the partition is {state}: no report of the source's end"))
        }
        _ => None,
    }
}

/// Every tailed partition under `root` (one with a tail state or a progress file), in name order.
pub fn tail_lags(root: &Path, status: &Status, now_ms: u64) -> Vec<TailLag> {
    // Each partition's catalog rows, found once: looked up per tailed partition, a scan of the status was quadratic
    // (10,000 partitions: 10^8 comparisons, most of `segmirror status`'s time).
    let mut recorded: HashMap<(&str, i32), Vec<Recorded<'_>>> = HashMap::new();
    for link in &status.links {
        for p in &link.partitions {
            recorded
                .entry((p.topic.as_str(), p.partition))
                .or_default()
                .push((link, p));
        }
    }
    tailed_partitions(root)
        .into_iter()
        .map(|(topic, partition)| {
            let rows = recorded
                .get(&(topic.as_str(), partition))
                .map_or(&[][..], Vec::as_slice);
            lag_of(root, status, rows, &topic, partition, now_ms)
        })
        .collect()
}

/// A partition's row in the catalog's status, with its link.
type Recorded<'a> = (&'a LinkStatus, &'a PartitionStatus);

fn lag_of(
    root: &Path,
    status: &Status,
    recorded: &[Recorded<'_>],
    topic: &str,
    partition: i32,
    now_ms: u64,
) -> TailLag {
    let mut problems = Vec::new();
    let active = recorded_active_segment(root, topic, partition).unwrap_or_else(|e| {
        problems.push(e.to_string());
        None
    });
    let progress = recorded_progress(root, topic, partition).unwrap_or_else(|e| {
        problems.push(e);
        None
    });
    // Only the path of the record depends on the partition: the topic id is not part of it.
    let claim = recorded_claim(
        root,
        &PartitionRef {
            topic: topic.to_string(),
            partition,
            topic_id: Default::default(),
        },
    )
    .unwrap_or_else(|e| {
        problems.push(e.to_string());
        None
    });
    let catalog_end = recorded.iter().filter_map(|(_, p)| p.installed_end_offset).max();
    let installed = active.as_ref().and_then(|a| a.next_offset).max(catalog_end);
    let (mut lag_offsets, mut lag_bytes, mut lag_seconds) = (None, None, None);
    let lag_unknown = progress.as_ref().and_then(|_| not_reported(status, recorded));
    if let (Some(p), None) = (&progress, &lag_unknown) {
        let end = installed.unwrap_or(0);
        lag_offsets = Some((p.log_end_offset - end).max(0));
        lag_seconds = Some(
            p.behind_since_ms(end)
                .map_or(0, |since| now_ms.saturating_sub(since) / 1000),
        );
        lag_bytes = match &active {
            Some(a) if a.segment_base == p.active_segment_base => {
                Some(p.active_segment_size.saturating_sub(a.position))
            }
            // Nothing of the source is missing: no bytes either, whatever segment the mirror is in.
            _ if lag_offsets == Some(0) => Some(0),
            _ => None,
        };
    }
    TailLag {
        topic: topic.to_string(),
        partition,
        source_log_end_offset: progress.as_ref().map(|p| p.log_end_offset),
        source_high_watermark: progress.as_ref().and_then(|p| p.high_watermark),
        source_seen_at_ms: progress.as_ref().map(|p| p.received_at_ms),
        shipped_end_offset: progress
            .as_ref()
            .and_then(|p| p.shipped)
            .map(|s| s.end_offset.max(installed.unwrap_or(0))),
        installed_end_offset: installed,
        lag_offsets,
        lag_bytes,
        lag_seconds,
        claim_node: claim.as_ref().map(|c| c.node),
        claim_epoch: claim.as_ref().map(|c| c.epoch),
        lag_unknown,
        problem: (!problems.is_empty()).then(|| problems.join("; ")),
    }
}

#[cfg(test)]
mod tests;
