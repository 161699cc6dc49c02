//! Commit planned offsets ([`crate::offsets_plan::plan`]) on the target cluster, group by group, and read each
//! commit back.
//!
//! Why here and not in the command: `segmirror offsets commit` and `segmirror failover` commit by the same rules —
//! no leader epoch (a source epoch on a target makes clients loop or reset: docs/promotion.md), a memberless
//! commit (generation -1, as `kafka-consumer-groups --reset-offsets` does), which the coordinator accepts only for
//! a group without active members: such a group is refused and reported, never forced; and every commit read back
//! (OffsetFetch) and compared.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::admin::{AdminClient, OffsetToCommit};
use crate::error::error_name;
use crate::offsets_plan::PlannedOffset;

/// What happened to one group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Committed,
    /// A dry run: would be committed.
    Planned,
    /// Active members on the target.
    Refused,
    Failed,
    /// No offset of it is installed on the target.
    Nothing,
}

/// One group's line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct GroupReport {
    pub group: String,
    pub outcome: Outcome,
    /// The group on the target, as its coordinator describes it.
    pub target_state: Option<String>,
    pub target_members: Option<usize>,
    /// `classic` or `consumer` (KIP-848), as the target's describe answered.
    pub kind: Option<&'static str>,
    pub error: Option<String>,
    pub offsets: Vec<OffsetReport>,
}

/// One offset of a group's report.
#[derive(Debug, Clone, Serialize)]
pub struct OffsetReport {
    #[serde(flatten)]
    pub planned: PlannedOffset,
    pub clamped: bool,
    /// The broker's refusal of this partition's commit, or a read-back that differs.
    pub error: Option<String>,
}

/// Whether any group was refused or failed (the commands exit 2 then).
pub fn any_refused_or_failed(reports: &[GroupReport]) -> bool {
    reports
        .iter()
        .any(|g| matches!(g.outcome, Outcome::Refused | Outcome::Failed))
}

/// Commit every group of `planned` (or, with `dry_run`, only check that each would be accepted). A group's failure
/// is in its report; the error is for the connection as a whole.
pub async fn commit_planned(
    admin: &mut AdminClient,
    planned: BTreeMap<String, Vec<PlannedOffset>>,
    dry_run: bool,
) -> Vec<GroupReport> {
    let mut reports = Vec::new();
    for (group, offsets) in planned {
        let mut report = GroupReport {
            group: group.clone(),
            outcome: Outcome::Nothing,
            target_state: None,
            target_members: None,
            kind: None,
            error: None,
            offsets: offsets
                .into_iter()
                .map(|planned| OffsetReport {
                    clamped: planned.clamped(),
                    planned,
                    error: None,
                })
                .collect(),
        };
        if let Err(e) = commit_group(admin, &mut report, dry_run).await {
            report.outcome = Outcome::Failed;
            report.error = Some(e.to_string());
        }
        reports.push(report);
    }
    reports
}

async fn commit_group(admin: &mut AdminClient, report: &mut GroupReport, dry_run: bool) -> crate::Result<()> {
    let to_commit: Vec<OffsetToCommit> = report
        .offsets
        .iter()
        .filter_map(|o| {
            o.planned.commit.map(|offset| OffsetToCommit {
                topic: o.planned.topic.clone(),
                partition: o.planned.partition,
                offset,
                metadata: o.planned.metadata.clone(),
            })
        })
        .collect();
    if to_commit.is_empty() {
        return Ok(());
    }
    let state = admin.group_state(&report.group).await?;
    report.target_state = Some(state.state.clone());
    report.target_members = Some(state.members);
    report.kind = Some(state.kind);
    if !state.accepts_simple_commit() {
        report.outcome = Outcome::Refused;
        report.error = Some(format!(
            "{} active member(s) on the target (state {}): a commit without a member would be refused; stop the \
             group's consumers and run again",
            state.members, state.state
        ));
        return Ok(());
    }
    if dry_run {
        report.outcome = Outcome::Planned;
        return Ok(());
    }
    let answers = admin.commit_offsets(&report.group, &to_commit).await?;
    let mut failed = false;
    for ((topic, partition), code) in answers {
        if code != 0 {
            failed = true;
            if let Some(o) = report
                .offsets
                .iter_mut()
                .find(|o| o.planned.topic == topic && o.planned.partition == partition)
            {
                o.error = Some(format!("OffsetCommit refused: {}", error_name(code)));
            }
        }
    }
    let partitions: Vec<(String, i32)> = to_commit.iter().map(|o| (o.topic.clone(), o.partition)).collect();
    let fetched = admin.fetch_offsets(&report.group, &partitions).await?;
    for o in report.offsets.iter_mut().filter(|o| o.error.is_none()) {
        let Some(want) = o.planned.commit else { continue };
        match fetched.get(&(o.planned.topic.clone(), o.planned.partition)) {
            Some(f) if f.offset == want && f.leader_epoch == -1 => {}
            Some(f) => {
                failed = true;
                o.error = Some(format!(
                    "read back offset {} leader epoch {} (committed {want}, no epoch)",
                    f.offset, f.leader_epoch
                ));
            }
            None => {
                failed = true;
                o.error = Some("not in the OffsetFetch answer".into());
            }
        }
    }
    report.outcome = if failed { Outcome::Failed } else { Outcome::Committed };
    Ok(())
}
