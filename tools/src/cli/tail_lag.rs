//! The tail replication lag `segmirror status` shows: per tailed partition of a mirror root, the source's log end
//! as the shipper last reported it (`applier::tail::RecordedProgress`), what the mirror holds durable (the tail
//! state file, else the catalog's installed end), and the lag between them in offsets, bytes and seconds.
//!
//! Read from files only, so it works with the applier stopped: that is when a lag matters most. The figures are as
//! fresh as the last report (one a second while a shipper is connected, see `PROGRESS_INTERVAL`); the report's age
//! is shown beside them.
//!
//! A figure that is not known is absent, never 0: while the partition's link (or the partition) is not moving data
//! (paused, promoted, deleted) no session runs and no report comes, so the source may grow without the mirror
//! hearing of it; the lag is then unknown and `lag_unknown` says why, while the last report's own figures (source
//! end, high watermark, shipped, with their age) are still shown as what they are.

use std::fs;
use std::path::Path;

use segmirror_applier::tail::{
    recorded_active_segment, recorded_claim, recorded_progress, CLAIMS_DIR, PROGRESS_DIR, TAIL_STATE_DIR,
};
use segmirror_catalog::Status;
use segmirror_transport::direct::payload::PartitionRef;
use serde::Serialize;

/// How the lag columns are defined, shown under `status --help`.
pub const TAIL_LAG_HELP: &str = "\
Tail lag (mirrors fed by `segmirror ship` and `segmirror tail-apply --listen|--connect`), per partition: `source end` is \
the source's log end offset as the shipper last reported it (reports go out at most once a second while connected, \
and `seen` is how long ago the applier received the last one); `hw` the source's high watermark when the shipper \
knows it; `installed` the offset after the mirror's last durable record. `lag offsets` = source end - installed. \
`lag bytes` = the source's active segment size - the mirror's durable bytes of it, when the mirror is in the \
source's active segment, else `?` (unknown: the mirror is whole segments behind). `lag s` = 0 when the last report \
shows nothing beyond installed, else now - when the applier first received a report whose source end exceeded \
installed (since then the source has held a record the mirror lacks); with the applier stopped it keeps growing. \
While the link or the partition is paused (or promoted, deleted) no report comes and the three lag columns are `?` \
(unknown; absent from --json, with `lag_unknown` saying why). \
`shipped` the offset after the last record the shipper has read and sent (in flight or installed), as of the last \
report and never less than installed; `?` when the shipper does not report it (an older one). \
Figures are as of the last report. With a source cluster (`apply --listen --cluster`), `claim` is the source broker \
(node id) whose shipper holds the partition and the leader epoch it was granted at (`-` before any claim).";

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
fn not_reported(status: &Status, topic: &str, partition: i32) -> Option<String> {
    use segmirror_catalog::{LinkState, PartitionState};
    let recorded = status.links.iter().find_map(|l| {
        l.partitions
            .iter()
            .find(|p| p.topic == topic && p.partition == partition)
            .map(|p| (l, Some(p)))
    });
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
    let mut names = std::collections::BTreeSet::new();
    let tail = root.join(TAIL_STATE_DIR);
    for dir in [tail.clone(), tail.join(PROGRESS_DIR), tail.join(CLAIMS_DIR)] {
        let Ok(entries) = fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            if let Some((topic, partition)) = stem.rsplit_once('-') {
                if let Ok(partition) = partition.parse::<i32>() {
                    names.insert((topic.to_string(), partition));
                }
            }
        }
    }
    names
        .into_iter()
        .map(|(topic, partition)| lag_of(root, status, &topic, partition, now_ms))
        .collect()
}

fn lag_of(root: &Path, status: &Status, topic: &str, partition: i32, now_ms: u64) -> TailLag {
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
    let catalog_end = status
        .links
        .iter()
        .flat_map(|l| &l.partitions)
        .filter(|p| p.topic == topic && p.partition == partition)
        .filter_map(|p| p.installed_end_offset)
        .max();
    let installed = active.as_ref().and_then(|a| a.next_offset).max(catalog_end);
    let (mut lag_offsets, mut lag_bytes, mut lag_seconds) = (None, None, None);
    let lag_unknown = progress.as_ref().and_then(|_| not_reported(status, topic, partition));
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

/// The tail lag rows of the table (nothing when no partition is tailed).
pub fn render(lags: &[TailLag], now_ms: u64) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if lags.is_empty() {
        return out;
    }
    // The claim column only for a mirror of several shippers: a single shipper's table stays as it was.
    let claims = lags.iter().any(|l| l.claim_node.is_some());
    let _ = writeln!(
        out,
        "{:<32} {:>14} {:>8} {:>14} {:>14} {:>12} {:>12} {:>8} {:>14}{}",
        "tail partition",
        "source end",
        "seen",
        "hw",
        "installed",
        "lag offsets",
        "lag bytes",
        "lag s",
        "shipped",
        if claims {
            format!(" {:>16}", "claim")
        } else {
            String::new()
        }
    );
    let opt = |v: Option<String>| v.unwrap_or_else(|| "?".to_string());
    for l in lags {
        let _ = writeln!(
            out,
            "{:<32} {:>14} {:>8} {:>14} {:>14} {:>12} {:>12} {:>8} {:>14}{}{}",
            format!("{}-{}", l.topic, l.partition),
            opt(l.source_log_end_offset.map(|o| o.to_string())),
            opt(l
                .source_seen_at_ms
                .map(|at| format!("{}s ago", now_ms.saturating_sub(at) / 1000))),
            opt(l.source_high_watermark.map(|o| o.to_string())),
            opt(l.installed_end_offset.map(|o| o.to_string())),
            opt(l.lag_offsets.map(|o| o.to_string())),
            opt(l.lag_bytes.map(|o| o.to_string())),
            opt(l.lag_seconds.map(|o| o.to_string())),
            opt(l.shipped_end_offset.map(|o| o.to_string())),
            match (claims, l.claim_node, l.claim_epoch) {
                (false, _, _) => String::new(),
                (true, Some(node), Some(epoch)) => format!(" {:>16}", format!("node {node} @{epoch}")),
                (true, _, _) => format!(" {:>16}", "-"),
            },
            [&l.lag_unknown, &l.problem]
                .into_iter()
                .flatten()
                .map(|why| format!("  ({why})"))
                .collect::<String>(),
        );
    }
    out
}

/// The truncation rows of the table (nothing when there were none): per partition the offset range `[from, to)`,
/// what happened to it (`truncated`: removed from the mirror and kept in the archive file named, relative to the
/// mirror root; `diverged`: the source lost committed records, nothing removed, the partition stopped) and the
/// leader-epoch evidence.
pub fn render_truncations(rows: &[segmirror_catalog::TruncationRecord]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    if rows.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\n{:<32} {:<9} {:>14} {:>14} {:>8}  archive / evidence",
        "truncated partition", "kind", "from offset", "to offset", "size"
    );
    for r in rows {
        let kind = match r.kind {
            segmirror_catalog::TruncationKind::Truncated => "truncated",
            segmirror_catalog::TruncationKind::Diverged => "diverged",
        };
        let _ = writeln!(
            out,
            "{:<32} {:<9} {:>14} {:>14} {:>8}  {} (mirror epoch {}, source epoch {} ends at {})",
            format!("{}-{}", r.topic, r.partition),
            kind,
            r.from_offset,
            r.to_offset,
            r.size.map_or("-".to_string(), |s| format!("{s} B")),
            r.archive_path.as_deref().unwrap_or("partition stopped"),
            r.mirror_epoch,
            r.source_epoch,
            r.source_end_offset
        );
    }
    out
}

#[cfg(test)]
mod truncation_tests {
    use segmirror_catalog::{TruncationKind, TruncationRecord};

    use super::render_truncations;

    #[test]
    fn truncations_show_their_ranges_and_archive() {
        assert_eq!(render_truncations(&[]), "");
        let row = |kind, archive: Option<&str>| TruncationRecord {
            link: "l".into(),
            topic: "orders".into(),
            partition: 3,
            kind,
            from_offset: 120,
            to_offset: 150,
            mirror_epoch: 4,
            source_epoch: 4,
            source_end_offset: 120,
            archive_path: archive.map(str::to_string),
            sha256: None,
            size: archive.map(|_| 2048),
            at_ms: 0,
        };
        let table = render_truncations(&[
            row(TruncationKind::Truncated, Some(".archive/orders-3/a.log")),
            row(TruncationKind::Diverged, None),
        ]);
        let lines: Vec<&str> = table.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len(), 3, "{table}");
        for (line, kind, tail) in [
            (lines[1], "truncated", ".archive/orders-3/a.log"),
            (lines[2], "diverged", "partition stopped"),
        ] {
            assert!(line.starts_with("orders-3"), "{line}");
            assert!(
                line.contains(kind) && line.contains(" 120 ") && line.contains(" 150 "),
                "{line}"
            );
            assert!(
                line.contains(tail) && line.contains("source epoch 4 ends at 120"),
                "{line}"
            );
        }
    }
}
