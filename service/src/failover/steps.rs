//! The steps of a failover, in order, and what each does (the journal around them is in `mod.rs`).
//!
//! Each step returns its outcome as one line for the journal and the report, or an error that stops the failover
//! at that step (the rerun redoes it). Each is idempotent: see the module doc of `mod.rs`.

use std::time::Duration;

use anyhow::{bail, Context};
use cluster_client::admin::AdminClient;
use cluster_client::offsets_commit::{any_refused_or_failed, commit_planned, Outcome};
use cluster_client::offsets_plan::{installed_log_ends, plan};
use cluster_client::topics_plan::Verdict;
use cluster_client::topics_sync::{sync_topics, TopicsMode};
use segment_format::failover_source::GroupOffset;
use segmirror_applier::promote::{self, PromoteRequest};
use segmirror_catalog::Catalog;

use super::report::{Details, OffsetsReport};
use super::{brokers, cut, Failover, FailoverConfig, Narrator};
use crate::runtime::Runtime;

/// One step of the sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Cut,
    Topics,
    StopBrokers,
    Install,
    StartBrokers,
    Offsets,
}

/// The sequence.
pub const STEPS: [Step; 6] = [
    Step::Cut,
    Step::Topics,
    Step::StopBrokers,
    Step::Install,
    Step::StartBrokers,
    Step::Offsets,
];

impl Step {
    /// The name in the journal, the report and the hooks' `SEGMIRROR_FAILOVER_STEP`.
    pub fn name(self) -> &'static str {
        match self {
            Step::Cut => "cut",
            Step::Topics => "topics",
            Step::StopBrokers => "stop-brokers",
            Step::Install => "install",
            Step::StartBrokers => "start-brokers",
            Step::Offsets => "offsets",
        }
    }
}

/// Run `step`; what it reports besides its outcome line goes to `details` (`failover --json`).
pub fn run_step(
    step: Step,
    failover: &Failover,
    catalog: &mut Catalog,
    details: &mut Details,
) -> anyhow::Result<String> {
    let Failover {
        config, runtime, out, ..
    } = *failover;
    match step {
        Step::Cut => cut::cut(failover, catalog, details),
        Step::Topics => topics(config, catalog, runtime, out),
        Step::StopBrokers => brokers::stop(config, out),
        Step::Install => install(config, catalog, out),
        Step::StartBrokers => brokers::start(config, runtime, out),
        Step::Offsets => offsets(config, catalog, runtime, out, details),
    }
}

fn bootstrap(config: &FailoverConfig) -> anyhow::Result<&str> {
    config.bootstrap.as_deref().context("--bootstrap is needed")
}

/// Create the link's topics on the target, or check them.
fn topics(config: &FailoverConfig, catalog: &Catalog, runtime: &Runtime, out: &dyn Narrator) -> anyhow::Result<String> {
    if catalog.link_meta(&config.link)?.is_none() {
        bail!(
            "no metadata of link {} recorded: the shipper must run with --metadata-log-dir (and --groups) so that the \
             target topics and offsets are known; or create the topics with `segmirror topics create --from FILE`",
            config.link
        );
    }
    let source = catalog.link_topics(&config.link)?;
    let timeout = Duration::from_secs(config.timeout);
    let bootstrap = bootstrap(config)?;
    let checks = runtime.block_on(async {
        let mut admin = AdminClient::connect(bootstrap, timeout).await?;
        sync_topics(
            &mut admin,
            TopicsMode::Create,
            &source,
            config.replication_factor,
            timeout,
        )
        .await
    })??;
    out.topics(&checks)?;
    let count = |v: Verdict| checks.iter().filter(|c| c.verdict == v).count();
    let summary = format!(
        "{} topic(s): {} created, {} matching, {} differing, {} failed",
        checks.len(),
        count(Verdict::Created),
        count(Verdict::Matches),
        count(Verdict::Differs),
        count(Verdict::Failed)
    );
    if !TopicsMode::Create.acceptable(&checks, config.allow_differences) {
        bail!("{summary} (the differences are listed above; --allow-differences goes on anyway)");
    }
    Ok(summary)
}

/// The one place a failover builds its promotion (so the request's newer fields are wired here only).
fn promote_request(config: &FailoverConfig) -> anyhow::Result<PromoteRequest> {
    // Every --log-dir is a replica's: each partition goes into every one that holds its directory.
    let Some((log_dir, replicas)) = config.log_dirs.split_first() else {
        bail!("no --log-dir given");
    };
    // The rest: fields that exist only with the applier's `failpoints` feature (crash tests), never set here.
    #[allow(clippy::needless_update)]
    Ok(PromoteRequest {
        mirror_root: config.mirror.clone(),
        log_dir: log_dir.clone(),
        replica_log_dirs: replicas.to_vec(),
        link: Some(config.link.clone()),
        topics: None,
        force: false,
        target_config: config.target_config.clone(),
        allow_retention_delete: config.allow_retention_delete,
        parallel: promote::DEFAULT_PARALLEL,
        handover: config.handover.parse().map_err(anyhow::Error::msg)?,
        consistent_cut: config.consistent_cut,
        ..PromoteRequest::default()
    })
}

/// Promote the link's partitions into the stopped broker's log dir.
fn install(config: &FailoverConfig, catalog: &mut Catalog, out: &dyn Narrator) -> anyhow::Result<String> {
    let request = promote_request(config)?;
    match promote::promote(&request, catalog) {
        Ok(report) => {
            for note in &report.notes {
                out.line(&format!("note: {note}"));
            }
            for loss in &report.retention_deletes {
                out.line(&format!("retention: {loss}"));
            }
            let mut renamed = 0;
            let mut aborted = 0;
            for p in &report.partitions {
                renamed += usize::from(p.handed_over);
                aborted += p.transactions_aborted.len();
                for t in &p.transactions_aborted {
                    out.line(&format!(
                        "{}-{}: aborted the transaction open at the cut: producer id {}, first offset {}, {} \
                         record(s); ABORT marker at offset {}",
                        p.topic, p.partition, t.producer_id, t.first_offset, t.records, t.marker_offset
                    ));
                }
            }
            for r in &report.log_dirs {
                out.line(&format!(
                    "log dir {}: {:?}, {} partition(s), {} bytes",
                    r.log_dir.display(),
                    r.outcome,
                    r.partitions,
                    r.log_bytes
                ));
            }
            let dirs: Vec<String> = if report.log_dirs.is_empty() {
                vec![report.log_dir.display().to_string()]
            } else {
                report
                    .log_dirs
                    .iter()
                    .map(|r| r.log_dir.display().to_string())
                    .collect()
            };
            Ok(format!(
                "{} partition(s) installed into {} ({} promoted by this run, {renamed} handed over by rename, \
                 {aborted} open transaction(s) aborted)",
                report.partitions.len(),
                dirs.join(", "),
                report.changed()
            ))
        }
        Err(promote::Error::Refused { refusals }) => {
            for r in &refusals {
                out.warn(&format!("  - {r}"));
            }
            bail!("promote refused, nothing changed ({} reason(s) above)", refusals.len())
        }
        Err(e) => Err(anyhow::Error::new(e).context("promotion failed")),
    }
}

/// Commit the link's groups' offsets on the target (the source's and those committed through `segmirror serve`),
/// clamped to the installed log ends.
fn offsets(
    config: &FailoverConfig,
    catalog: &Catalog,
    runtime: &Runtime,
    out: &dyn Narrator,
    details: &mut Details,
) -> anyhow::Result<String> {
    let offsets: Vec<GroupOffset> = crate::offsets::failover_offsets(catalog, &config.link)?;
    let topics: Vec<String> = catalog.link_topics(&config.link)?.into_iter().map(|t| t.name).collect();
    let keep = |t: &str| topics.iter().any(|n| n == t);
    let mut installed = cluster_client::offsets_plan::InstalledEnds::new();
    for dir in &config.log_dirs {
        installed.extend(installed_log_ends(dir, &keep).with_context(|| format!("reading {}", dir.display()))?);
    }
    let planned = plan(&offsets, &installed);
    let groups = planned.len();
    let clamped: usize = planned.values().flatten().filter(|o| o.clamped()).count();
    let bootstrap = bootstrap(config)?;
    let timeout = Duration::from_secs(config.timeout);
    let reports = runtime.block_on(async {
        let mut admin = AdminClient::connect(bootstrap, timeout).await?;
        anyhow::Ok(commit_planned(&mut admin, planned, false).await)
    })??;
    out.commits(&reports)?;
    let committed = reports
        .iter()
        .filter(|g| g.outcome == Outcome::Committed)
        .flat_map(|g| &g.offsets)
        .filter(|o| o.planned.commit.is_some())
        .count();
    let refused = any_refused_or_failed(&reports);
    details.offsets = Some(OffsetsReport {
        recorded: offsets.len(),
        committed,
        clamped,
        groups: reports,
    });
    if refused {
        bail!("a group was refused or a commit failed (listed above)");
    }
    Ok(format!(
        "{committed} offset(s) of {groups} group(s) committed ({} recorded), {clamped} clamped to the installed data",
        offsets.len()
    ))
}
