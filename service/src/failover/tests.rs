//! The failover run as a library call, without the binary: the steps in order, the journal, a failed step that
//! stops the run and a rerun that skips what is done, and what the steps say through the [`Narrator`].

use std::cell::RefCell;
use std::path::Path;
use std::time::Instant;

use cluster_client::offsets_commit::GroupReport;
use cluster_client::topics_plan::TopicCheck;
use segmirror_catalog::{Catalog, LinkSpec, LinkState};

use super::report::{CutReport, StepStatus};
use super::*;

/// Keeps what the failover says.
#[derive(Default)]
struct Kept {
    lines: RefCell<Vec<String>>,
    warnings: RefCell<Vec<String>>,
    left_behind: RefCell<Vec<usize>>,
}

impl Narrator for Kept {
    fn line(&self, text: &str) {
        self.lines.borrow_mut().push(text.to_string());
    }

    fn warn(&self, text: &str) {
        self.warnings.borrow_mut().push(text.to_string());
    }

    fn topics(&self, _checks: &[TopicCheck]) -> std::io::Result<()> {
        Ok(())
    }

    fn commits(&self, _reports: &[GroupReport]) -> std::io::Result<()> {
        Ok(())
    }

    fn left_behind(&self, report: &CutReport) -> std::io::Result<()> {
        self.left_behind.borrow_mut().push(report.left_behind.len());
        Ok(())
    }
}

fn config(root: &Path) -> FailoverConfig {
    FailoverConfig {
        link: "dr".into(),
        mirror: root.join("mirror"),
        catalog: Some(root.join("catalog.sqlite")),
        cut: CutMode::Now,
        drain_timeout: 1,
        drain_quiet: 0.0,
        prefix: String::new(),
        s3: S3Options::default(),
        // Nothing listens on the discard port; the topics step fails before it would connect anyway: the link
        // carries no metadata.
        bootstrap: Some("127.0.0.1:9".into()),
        log_dirs: vec![root.join("target")],
        stop_hook: None,
        start_hook: None,
        broker_timeout: 1,
        allow_differences: false,
        replication_factor: None,
        handover: "auto".into(),
        consistent_cut: None,
        target_config: None,
        allow_retention_delete: false,
        timeout: 1,
    }
}

/// The catalog of `config`'s mirror, with a direct link `dr` recorded.
fn catalog_with_link(config: &FailoverConfig) -> Catalog {
    std::fs::create_dir_all(&config.mirror).unwrap();
    let (_, mut catalog) = crate::catalog::open_mirror_catalog(config.catalog.clone(), &config.mirror, false).unwrap();
    catalog
        .create_link(&LinkSpec {
            name: "dr".into(),
            store_url: "direct:127.0.0.1:1".into(),
            topics_regex: "orders".into(),
            groups_regex: None,
        })
        .unwrap();
    catalog
}

#[test]
fn a_failed_step_stops_the_run_and_a_rerun_skips_what_is_done() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let mut catalog = catalog_with_link(&config);
    let runtime = Runtime::new();
    let kept = Kept::default();
    let failover = Failover {
        config: &config,
        runtime: &runtime,
        out: &kept,
    };

    let first = run(&failover, &mut catalog, "active").unwrap();
    assert_eq!(first.end, RunEnd::StoppedAtFailedStep);
    let statuses: Vec<StepStatus> = first.steps.iter().map(|(s, _, _)| *s).collect();
    assert_eq!(statuses, [StepStatus::Done, StepStatus::Failed]);
    let error = first.steps[1].2.clone().unwrap_or_default();
    assert!(error.contains("no metadata of link dr recorded"), "{error}");
    assert_eq!(catalog.link("dr").unwrap().state, LinkState::Promoted);
    let lines = kept.lines.borrow().join("\n");
    assert!(lines.contains("[cut] link dr is promoted"), "{lines}");
    assert!(lines.contains("[cut] RPO: 0 record offset(s)"), "{lines}");
    assert_eq!(*kept.left_behind.borrow(), [0], "the cut's table, of no partition");
    let cut = first.details.cut.as_ref().expect("the cut's report");
    assert_eq!(cut.rpo.partitions, 0);
    assert!(
        kept.warnings.borrow().iter().any(|w| w.contains("step topics failed")),
        "{:?}",
        kept.warnings.borrow()
    );

    let again = Kept::default();
    let rerun = Failover {
        out: &again,
        ..failover
    };
    let second = run(&rerun, &mut catalog, "promoted").unwrap();
    assert_eq!(second.end, RunEnd::StoppedAtFailedStep);
    assert_eq!(second.steps[0].0, StepStatus::DoneEarlier);
    assert_eq!(second.steps[1].0, StepStatus::Failed);
    let lines = again.lines.borrow().join("\n");
    assert!(lines.contains("[cut] done earlier: RPO: 0 record offset(s)"), "{lines}");
    assert!(
        lines.contains("[topics] interrupted earlier; redoing it (attempt 2)"),
        "{lines}"
    );
    assert!(
        !lines.contains("is promoted: its appliers"),
        "the cut is not redone: {lines}"
    );
    assert!(second.details.cut.is_none(), "the cut did not run again");

    let report = report(
        "dr",
        &catalog,
        "promoted",
        Instant::now(),
        second.details,
        &second.steps,
    )
    .unwrap();
    assert!(!report.finished);
    let names: Vec<&str> = report.steps.iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        ["cut", "topics", "stop-brokers", "install", "start-brokers", "offsets"]
    );
    assert_eq!(
        (report.steps[0].status, report.steps[0].attempts),
        (StepStatus::DoneEarlier, 1)
    );
    assert_eq!(
        (report.steps[1].status, report.steps[1].attempts),
        (StepStatus::Failed, 2)
    );
    assert_eq!(report.steps[2].status, StepStatus::NotRun);
}

#[test]
fn a_paused_link_is_not_drained() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.cut = CutMode::Drain;
    let mut catalog = catalog_with_link(&config);
    catalog.pause_link("dr").unwrap();
    let runtime = Runtime::new();
    let kept = Kept::default();
    let failover = Failover {
        config: &config,
        runtime: &runtime,
        out: &kept,
    };
    let outcome = run(&failover, &mut catalog, "paused").unwrap();
    assert_eq!(outcome.end, RunEnd::StoppedAtFailedStep);
    let error = outcome.steps[0].2.clone().unwrap_or_default();
    assert!(
        error.contains("link dr is paused") && error.contains("--now"),
        "{error}"
    );
    assert_eq!(catalog.link("dr").unwrap().state, LinkState::Paused, "nothing changed");
}
