//! The tables of what was done on the target cluster: topics created or checked, offsets committed.
//!
//! Why here: `segmirror topics`, `segmirror offsets commit` and `segmirror failover` print the same reports, and an
//! operator who ran the steps by hand must read the failover's output the same way.

use std::io::Write;

use cluster_client::offsets_commit::{GroupReport, Outcome};
use cluster_client::topics_plan::{TopicCheck, Verdict};

/// The topics report; `planning`: a missing topic is "to create", not "MISSING".
pub fn write_topics(out: &mut dyn Write, checks: &[TopicCheck], planning: bool) -> std::io::Result<()> {
    let verdict = |c: &TopicCheck| -> String {
        match &c.verdict {
            Verdict::Missing if planning => "to create".into(),
            Verdict::Missing => "MISSING".into(),
            Verdict::Created => "created".into(),
            Verdict::Matches => "matches".into(),
            Verdict::Differs => format!("DIFFERS ({})", c.differences.len()),
            Verdict::Failed => "FAILED".into(),
        }
    };
    let rows: Vec<[String; 4]> = checks
        .iter()
        .map(|c| {
            [
                c.topic.clone(),
                c.source_partitions.to_string(),
                c.target_partitions.map_or_else(|| "-".into(), |p| p.to_string()),
                verdict(c),
            ]
        })
        .collect();
    super::table::print(
        out,
        ["TOPIC", "SOURCE-PARTITIONS", "TARGET-PARTITIONS", "VERDICT"],
        &rows,
    )?;
    for c in checks {
        if let Some(e) = &c.error {
            writeln!(out, "{}: {e}", c.topic)?;
        }
        for d in &c.differences {
            writeln!(
                out,
                "{} {}: source {}, target {} ({})",
                d.topic,
                d.field,
                d.source.as_deref().unwrap_or("(not set)"),
                d.target.as_deref().unwrap_or("(none)"),
                d.note
            )?;
        }
    }
    Ok(())
}

/// The offsets-commit report: one line per (group, partition), then each error or note.
pub fn write_commits(out: &mut dyn Write, reports: &[GroupReport]) -> std::io::Result<()> {
    let rows: Vec<[String; 6]> = reports
        .iter()
        .flat_map(|g| {
            g.offsets.iter().map(move |o| {
                let outcome = match (&g.outcome, &o.error, o.planned.commit) {
                    (_, Some(_), _) => "FAILED",
                    (_, None, None) => "skipped",
                    (Outcome::Committed, None, Some(_)) if o.clamped => "committed (clamped)",
                    (Outcome::Committed, None, Some(_)) => "committed",
                    (Outcome::Planned, None, Some(_)) if o.clamped => "would commit (clamped)",
                    (Outcome::Planned, None, Some(_)) => "would commit",
                    (Outcome::Refused, ..) => "REFUSED",
                    (Outcome::Failed, ..) => "FAILED",
                    (Outcome::Nothing, ..) => "skipped",
                };
                [
                    g.group.clone(),
                    o.planned.topic.clone(),
                    o.planned.partition.to_string(),
                    o.planned.wanted.to_string(),
                    o.planned.commit.map_or_else(|| "-".into(), |c| c.to_string()),
                    outcome.to_string(),
                ]
            })
        })
        .collect();
    super::table::print(
        out,
        ["GROUP", "TOPIC", "PARTITION", "WANTED", "COMMITTED", "OUTCOME"],
        &rows,
    )?;
    for g in reports {
        if let Some(e) = &g.error {
            writeln!(out, "group {}: {e}", g.group)?;
        }
        for o in &g.offsets {
            let p = &o.planned;
            if let Some(e) = &o.error {
                writeln!(out, "group {} {}-{}: {e}", g.group, p.topic, p.partition)?;
            } else if let Some(note) = &p.note {
                writeln!(out, "group {} {}-{}: {note}", g.group, p.topic, p.partition)?;
            }
        }
    }
    Ok(())
}
