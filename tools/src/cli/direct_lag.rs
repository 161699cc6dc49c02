//! The tail replication lag as `segmirror status` prints it. The figures themselves (per tailed partition of a
//! mirror root: the source's log end as last reported, what the mirror holds durable, the lag between them) are
//! read by the applier from its own records ([`segmirror_applier::direct::tail_lags`]), so every consumer of them
//! reads the mirror root the same way; this module only explains and renders them.

pub use segmirror_applier::direct::TailLag;

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
