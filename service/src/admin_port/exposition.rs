//! Prometheus text exposition format 0.0.4 of a [`Snapshot`]: one `# HELP` and one `# TYPE` line per metric
//! family, then one sample line per label set.
//!
//! Why written here rather than with `prometheus-client`: the figures are a snapshot taken at scrape time (from
//! the mirror's files and the session observers), not counters registered once and updated in place; the crate's
//! registry would be filled and thrown away on every scrape, and it is not in the build yet. The format's rules are
//! few and all are here and tested: names match `[a-zA-Z_:][a-zA-Z0-9_:]*` (ours are constants), label values
//! escape `\`, `"` and newline, HELP text escapes `\` and newline, a family's samples follow its HELP/TYPE lines,
//! and counters end in `_total`.

use std::fmt::Write as _;

use super::figures::{LinkRow, PartitionRow, Snapshot};

/// The content type of the format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Every metric family: name, type, help. Kept in one table so the README's list and the output cannot drift
/// (a test checks that each appears in the README).
pub const FAMILIES: &[(&str, &str, &str)] = &[
    ("segmirror_link_state", "gauge", "1 for the link's current state (label state), 0 for the others."),
    ("segmirror_link_connected", "gauge", "1 while a session with the peer runs, else 0."),
    ("segmirror_link_partitions", "gauge", "Partitions this process knows on the link."),
    ("segmirror_link_sessions_total", "counter", "Sessions started with the peer."),
    ("segmirror_link_errors_total", "counter", "Sessions ended by an error, failed connects and refusals."),
    ("segmirror_partition_source_log_end_offset", "gauge", "The source's log end offset (next offset after its last complete batch), as last seen."),
    ("segmirror_partition_high_watermark", "gauge", "The source's high watermark, when known."),
    ("segmirror_partition_shipped_offset", "gauge", "Offset after the last record the shipper handed to the link."),
    ("segmirror_partition_installed_offset", "gauge", "Offset after the mirror's last durable record."),
    ("segmirror_partition_lag_offsets", "gauge", "Source log end minus shipped (shipper) or installed (applier)."),
    ("segmirror_partition_lag_bytes", "gauge", "Bytes of the source's active segment not yet shipped (shipper) or installed (applier); absent when whole segments behind."),
    ("segmirror_partition_lag_seconds", "gauge", "Seconds since the source first held a record not yet shipped (shipper) or installed (applier); 0 when caught up."),
    ("segmirror_partition_shipped_bytes_total", "counter", "Segment bytes handed to the link by this process."),
    ("segmirror_partition_installed_bytes_total", "counter", "Segment bytes made durable in the mirror by this process."),
    ("segmirror_partition_errors_total", "counter", "Rounds that ended in a refusal or failure for the partition (ship --store, apply --follow)."),
    ("segmirror_partition_state", "gauge", "1 for the partition's current state (label state: caught_up, behind, unknown), 0 for the others."),
];

/// The states `segmirror_partition_state` enumerates.
pub const PARTITION_STATES: &[&str] = &["caught_up", "behind", "unknown"];

/// A label value escaped: backslash, double quote and newline.
pub fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// HELP text escaped: backslash and newline.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// The snapshot in the text format.
pub fn render(snapshot: &Snapshot) -> String {
    let mut out = String::new();
    for (name, kind, help) in FAMILIES {
        let mut samples = String::new();
        for link in &snapshot.links {
            link_samples(&mut samples, name, link);
        }
        for row in &snapshot.partitions {
            partition_samples(&mut samples, name, row);
        }
        if samples.is_empty() {
            continue;
        }
        let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(out, "# TYPE {name} {kind}");
        out.push_str(&samples);
    }
    out
}

fn link_samples(out: &mut String, name: &str, link: &LinkRow) {
    let l = [("link", link.name.as_str())];
    let value: Option<u64> = match name {
        "segmirror_link_state" => {
            for state in link.states {
                let v = u8::from(*state == link.state);
                let _ = writeln!(out, "{name}{} {v}", labels(&[("link", &link.name), ("state", state)]));
            }
            None
        }
        "segmirror_link_connected" => Some(u64::from(link.connected)),
        "segmirror_link_partitions" => Some(link.partitions as u64),
        "segmirror_link_sessions_total" => Some(link.sessions),
        "segmirror_link_errors_total" => Some(link.errors),
        _ => None,
    };
    if let Some(v) = value {
        let _ = writeln!(out, "{name}{} {v}", labels(&l));
    }
}

fn partition_samples(out: &mut String, name: &str, row: &PartitionRow) {
    let partition = row.partition.to_string();
    let l = [
        ("link", row.link.as_str()),
        ("topic", row.topic.as_str()),
        ("partition", partition.as_str()),
    ];
    let value: Option<i128> = match name {
        "segmirror_partition_source_log_end_offset" => row.source_log_end.map(i128::from),
        "segmirror_partition_high_watermark" => row.high_watermark.map(i128::from),
        "segmirror_partition_shipped_offset" => row.shipped.map(i128::from),
        "segmirror_partition_installed_offset" => row.installed.map(i128::from),
        "segmirror_partition_lag_offsets" => row.lag_offsets.map(i128::from),
        "segmirror_partition_lag_bytes" => row.lag_bytes.map(i128::from),
        "segmirror_partition_lag_seconds" => row.lag_seconds.map(i128::from),
        "segmirror_partition_shipped_bytes_total" => row.shipped_bytes.map(i128::from),
        "segmirror_partition_installed_bytes_total" => row.installed_bytes.map(i128::from),
        "segmirror_partition_errors_total" => row.errors.map(i128::from),
        "segmirror_partition_state" => {
            for state in PARTITION_STATES {
                let v = u8::from(*state == row.state());
                let mut with_state = l.to_vec();
                with_state.push(("state", state));
                let _ = writeln!(out, "{name}{} {v}", labels(&with_state));
            }
            None
        }
        _ => None,
    };
    if let Some(v) = value {
        let _ = writeln!(out, "{name}{} {v}", labels(&l));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(topic: &str) -> PartitionRow {
        PartitionRow {
            link: "dr".into(),
            topic: topic.into(),
            partition: 3,
            source_log_end: Some(120),
            high_watermark: Some(118),
            shipped: None,
            installed: Some(100),
            lag_offsets: Some(20),
            lag_bytes: None,
            lag_seconds: Some(7),
            shipped_bytes: None,
            installed_bytes: Some(4096),
            errors: Some(2),
        }
    }

    fn snapshot() -> Snapshot {
        Snapshot {
            links: vec![LinkRow {
                name: "dr".into(),
                state: "paused",
                states: &["active", "paused"],
                connected: false,
                partitions: 1,
                sessions: 2,
                errors: 5,
            }],
            partitions: vec![row("orders")],
        }
    }

    /// The sample lines of `name`, without HELP/TYPE.
    fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
        text.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
            .collect()
    }

    #[test]
    fn every_family_has_help_and_type_before_its_samples() {
        let text = render(&snapshot());
        let lines: Vec<&str> = text.lines().collect();
        for (name, kind, _) in FAMILIES {
            let first_sample = lines.iter().position(|l| l.starts_with(&format!("{name}{{")));
            let help = lines.iter().position(|l| l.starts_with(&format!("# HELP {name} ")));
            let ty = lines.iter().position(|l| *l == format!("# TYPE {name} {kind}"));
            match first_sample {
                // A figure nobody knows (shipped on an applier) is left out, HELP and TYPE with it.
                None => assert!(
                    help.is_none() && ty.is_none(),
                    "{name} has HELP/TYPE but no sample:\n{text}"
                ),
                Some(s) => assert!(help.unwrap() + 1 == ty.unwrap() && ty.unwrap() < s, "{name}:\n{text}"),
            }
            if *kind == "counter" {
                assert!(name.ends_with("_total"), "{name}");
            }
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "{name}");
        }
    }

    #[test]
    fn partition_figures_carry_link_topic_and_partition_labels() {
        let text = render(&snapshot());
        assert_eq!(
            samples(&text, "segmirror_partition_installed_offset"),
            ["segmirror_partition_installed_offset{link=\"dr\",topic=\"orders\",partition=\"3\"} 100"]
        );
        assert_eq!(
            samples(&text, "segmirror_partition_lag_offsets"),
            ["segmirror_partition_lag_offsets{link=\"dr\",topic=\"orders\",partition=\"3\"} 20"]
        );
        assert_eq!(
            samples(&text, "segmirror_partition_installed_bytes_total"),
            ["segmirror_partition_installed_bytes_total{link=\"dr\",topic=\"orders\",partition=\"3\"} 4096"]
        );
        // Unknown figures are absent, not zero.
        assert!(samples(&text, "segmirror_partition_shipped_offset").is_empty());
        assert!(samples(&text, "segmirror_partition_lag_bytes").is_empty());
        // An enumerated state: one sample per state, 1 for the current one.
        assert_eq!(
            samples(&text, "segmirror_partition_state"),
            [
                "segmirror_partition_state{link=\"dr\",topic=\"orders\",partition=\"3\",state=\"caught_up\"} 0",
                "segmirror_partition_state{link=\"dr\",topic=\"orders\",partition=\"3\",state=\"behind\"} 1",
                "segmirror_partition_state{link=\"dr\",topic=\"orders\",partition=\"3\",state=\"unknown\"} 0",
            ]
        );
        assert_eq!(
            samples(&text, "segmirror_link_state"),
            [
                "segmirror_link_state{link=\"dr\",state=\"active\"} 0",
                "segmirror_link_state{link=\"dr\",state=\"paused\"} 1",
            ]
        );
        assert_eq!(
            samples(&text, "segmirror_link_errors_total"),
            ["segmirror_link_errors_total{link=\"dr\"} 5"]
        );
        assert_eq!(
            samples(&text, "segmirror_partition_errors_total"),
            ["segmirror_partition_errors_total{link=\"dr\",topic=\"orders\",partition=\"3\"} 2"]
        );
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape_label("line\nbreak"), "line\\nbreak");
        assert_eq!(escape_label("orders.v1-_x"), "orders.v1-_x");
        let mut s = snapshot();
        s.partitions = vec![row("we\"ird\\topic")];
        s.links[0].name = "l\nk".into();
        let text = render(&s);
        assert!(
            text.contains("segmirror_link_sessions_total{link=\"l\\nk\"} 2"),
            "{text}"
        );
        assert!(text.contains(r#"topic="we\"ird\\topic""#), "{text}");
        // Every line is one sample or a comment: no raw newline leaked out of a value.
        for line in text.lines() {
            assert!(line.starts_with('#') || line.starts_with("segmirror_"), "{line:?}");
        }
        assert_eq!(escape_help("a\\b\nc"), "a\\\\b\\nc");
    }

    #[test]
    fn the_readme_names_every_metric() {
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
        for (name, _, _) in FAMILIES {
            assert!(readme.contains(&format!("`{name}")), "README.md does not list {name}");
        }
    }

    #[test]
    fn an_empty_snapshot_renders_nothing() {
        assert_eq!(render(&Snapshot::default()), "");
    }
}
