//! `segmirror apply`: install what a shipper put in an object store into a mirror directory, byte for byte, and
//! record it in the catalog. Reruns install only what is new; an interrupted run is finished by the next one.
//!
//! Exit status: 0 when everything shipped is installed (or waits for the shipper, or was skipped on purpose; with
//! --follow: after a signal, or once the link is promoted or deleted, its expected end), 1
//! when a segment was refused (corrupt, or not what its manifest says, or past a hole in the chain), 2 on any other
//! failure (usage, a store folder that does not exist, a link neither the catalog nor the store has, another apply
//! holding the mirror, the store, the catalog, the mirror directory). Keys in the store that are not segmirror's are
//! warnings on stderr; they stop nothing.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use indicatif::ProgressBar;
use segmirror_applier::follow::{follow, FollowConfig, DEFAULT_POLL_INTERVAL};
use segmirror_applier::report::LinkMetaOutcome;
use segmirror_applier::{ApplyConfig, ApplyReport, PartitionOutcome, PartitionReport, Progress, SkipSegment, Verdict};
use segmirror_transport::manifest::KeyPrefix;
use segmirror_transport::{Store, StoreUrl};

use crate::cli::bucket_ends::CachedEnds;
use crate::cli::catalog::{open_mirror_catalog, CATALOG_HELP};
use crate::cli::link_gate::{ClosedLink, Side};
use crate::cli::metrics::MetricsArgs;
use crate::cli::runtime::Runtime;
use crate::cli::serve::admin::CatalogAdmin;
use crate::cli::serve::figures::{add_bucket_lag, LinkMeter, RoundMeter, RoundOutcome, Snapshot};
use crate::cli::serve::{self, App};
use crate::cli::store::S3Args;
use crate::cli::{progress, EXIT_CORRUPT, EXIT_USAGE_OR_IO};

#[derive(clap::Args)]
#[command(after_help = CATALOG_HELP)]
pub struct Args {
    /// Where the shipper wrote: a local folder (a path or file:///absolute/path) or s3://bucket[/prefix]. S3
    /// credentials come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN; AWS_REGION and
    /// AWS_ENDPOINT_URL are read too unless the flags below say otherwise.
    #[arg(long, value_name = "URL")]
    store: String,
    /// The mirror root: partitions are installed into DIR/<topic>-<partition>/ with Kafka's file names. A
    /// directory of segmirror's own, never a broker's log dir (`segmirror promote` hands partitions to a broker).
    #[arg(long, value_name = "DIR")]
    mirror: PathBuf,
    /// The link to apply (the name given to `segmirror seed --link`). Optional when the store holds one link.
    #[arg(long, value_name = "NAME")]
    link: Option<String>,
    /// Key prefix inside the store, as given to `segmirror seed --prefix`.
    #[arg(long, value_name = "P", default_value = "")]
    prefix: String,
    /// The catalog (SQLite) that records what is installed. See below for the default.
    #[arg(long, value_name = "PATH")]
    catalog: Option<PathBuf>,
    #[command(flatten)]
    s3: S3Args,
    /// Before installing a segment, also decompress every batch and check every record (slower; the default
    /// checks framing, every batch CRC, offsets, the indexes, the transaction index and the producer snapshot).
    #[arg(long)]
    deep: bool,
    /// Partitions installed at once (each one's versions still in offset order).
    #[arg(long, value_name = "N", default_value_t = segmirror_applier::DEFAULT_PARALLEL_PARTITIONS,
          value_parser = super::parse_parallel)]
    parallel: usize,
    /// Print the report as one JSON document instead of a table.
    #[arg(long)]
    json: bool,
    /// When another apply is running on the same mirror, wait for it to finish instead of exiting with status 2.
    #[arg(long)]
    wait: bool,
    /// Keep running: install each new version a `segmirror ship --store` commits, polling the store, until
    /// SIGTERM/SIGINT or the link is promoted or deleted (then exit 0). Holds the mirror for the whole run; never writes to the store, so several
    /// followers (each with its own mirror and catalog) can follow one store.
    #[arg(long)]
    follow: bool,
    /// With --follow: milliseconds between two looks at the store.
    #[arg(long, value_name = "MS", requires = "follow", default_value_t = DEFAULT_POLL_INTERVAL.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(1..))]
    poll_interval_ms: u64,
    /// With --follow (or the tail applier): metrics and the admin API.
    #[command(flatten)]
    metrics: MetricsArgs,
}

/// A bar over the bytes the plan will install, created once planning is done (the total is then known).
#[derive(Default)]
struct Bar {
    bar: OnceLock<ProgressBar>,
    bytes: AtomicU64,
    segments: AtomicU64,
    done: AtomicU64,
}

impl Bar {
    fn get(&self) -> &ProgressBar {
        self.bar
            .get_or_init(|| progress::byte_bar(self.bytes.load(Ordering::Relaxed), "applying"))
    }

    fn message(&self) {
        let (done, total) = (self.done.load(Ordering::Relaxed), self.segments.load(Ordering::Relaxed));
        self.get().set_message(format!("applying {done}/{total} segments"));
    }

    fn finish(&self) {
        if let Some(bar) = self.bar.get() {
            bar.finish_and_clear();
        }
    }
}

impl Progress for Bar {
    fn planned(&self, segments: u64, bytes: u64) {
        self.segments.fetch_add(segments, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn advance(&self, bytes: u64) {
        self.get().inc(bytes);
    }

    fn segment_done(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
        self.message();
    }
}

pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    let url = StoreUrl::parse(&args.store)?;
    // A mistyped folder must fail, not be created and reported as applied.
    let store = Store::open_existing(&url, &args.s3.options())?;
    let (catalog_path, catalog) = open_mirror_catalog(args.catalog.clone(), &args.mirror, false)?;
    if args.metrics.metrics_addr.is_some() && !args.follow {
        anyhow::bail!("--metrics-addr is for a process that keeps running: give --follow too");
    }
    let mut config = ApplyConfig::new(store, url.to_string(), &args.mirror)
        .with_prefix(KeyPrefix::new(&args.prefix)?)
        .with_deep_validation(args.deep)
        .with_wait_for_lock(args.wait)
        .with_parallel_partitions(args.parallel);
    if let Some(link) = &args.link {
        config = config.with_link(link);
    }
    if args.follow {
        return run_follow(config, catalog, catalog_path, &args, runtime);
    }
    let bar = Bar::default();
    let report = runtime.block_on(segmirror_applier::apply(&config, catalog, &bar))??;
    bar.finish();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report, &args.mirror, &catalog_path);
    }
    Ok(exit_code(&report))
}

/// The figures of a bucket follower: per partition of its link the catalog's installed end, with the bytes and
/// errors of this process's rounds (the lag against the bucket's newest versions is added by `add_bucket_lag`).
fn follower_snapshot(
    status: &segmirror_catalog::Status,
    link: &str,
    link_meter: &LinkMeter,
    rounds: &RoundMeter,
) -> Snapshot {
    let Some(recorded) = status.links.iter().find(|l| l.name == link) else {
        return Snapshot {
            links: Vec::new(),
            partitions: rounds.rows(),
        };
    };
    let state = recorded.state.as_str();
    let mut partitions = rounds.rows();
    for p in &recorded.partitions {
        match partitions
            .iter_mut()
            .find(|r| r.topic == p.topic && r.partition == p.partition)
        {
            Some(row) => row.installed = p.installed_end_offset.max(row.installed),
            None => {
                let row = RoundMeter::new(link, false);
                row.round(
                    &p.topic,
                    p.partition,
                    RoundOutcome {
                        through: p.installed_end_offset,
                        bytes: 0,
                        failed: false,
                    },
                );
                partitions.extend(row.rows());
            }
        }
    }
    Snapshot {
        links: vec![link_meter.row(
            link,
            state,
            &["active", "paused", "promoted", "deleted"],
            partitions.len(),
        )],
        partitions,
    }
}

/// `--follow`: runs until a signal; one line per run that installed something, a refusal or failure once per
/// partition until it changes.
fn run_follow(
    config: ApplyConfig,
    catalog: segmirror_catalog::Catalog,
    catalog_path: PathBuf,
    args: &Args,
    runtime: &Runtime,
) -> anyhow::Result<ExitCode> {
    let mut follow_config = FollowConfig::new(config);
    follow_config.poll_interval = std::time::Duration::from_millis(args.poll_interval_ms);
    let mirror = args.mirror.display().to_string();
    eprintln!(
        "segmirror apply: following {} into {mirror} (every {} ms) until SIGTERM/SIGINT",
        args.store, args.poll_interval_ms
    );
    let mut last_problem: std::collections::BTreeMap<String, String> = Default::default();
    let meter = std::sync::Arc::new(RoundMeter::new(args.link.as_deref().unwrap_or("?"), false));
    let stats = runtime.block_on(async {
        let shutdown = crate::cli::link::shutdown_on_signal()?;
        if let Some(addr) = &args.metrics.metrics_addr {
            // Pausing needs no gate here: every round reads the link's state from the catalog and skips a paused
            // link (`applier::apply`).
            let (gate, _) = tokio::sync::watch::channel(false);
            let link_meter = std::sync::Arc::new(LinkMeter::default());
            let (rows, path) = (meter.clone(), catalog_path.clone());
            let bucket = CachedEnds::new(
                Store::open_existing(&StoreUrl::parse(&args.store)?, &args.s3.options())?,
                KeyPrefix::new(&args.prefix)?,
                tokio::runtime::Handle::current(),
            );
            let snapshot = move || {
                let link = rows.link();
                match segmirror_catalog::Catalog::open(&path).and_then(|c| c.status()) {
                    Ok(status) => {
                        let mut figures = follower_snapshot(&status, &link, &link_meter, &rows);
                        // Before the first round, a follower without --link does not know its link ("?").
                        let ends = (link != "?").then(|| bucket.get(&link)).flatten();
                        if let Some(ends) = ends {
                            add_bucket_lag(&link, &mut figures.partitions, &ends, segment_format::now_ms());
                        }
                        figures
                    }
                    Err(e) => {
                        tracing::warn!(catalog = %path.display(), error = %e, "metrics: the catalog cannot be read");
                        Snapshot::default()
                    }
                }
            };
            let admin = CatalogAdmin {
                catalog_path: catalog_path.clone(),
                served: meter.link(),
                gate: std::sync::Arc::new(gate),
                meter: std::sync::Arc::new(LinkMeter::default()),
                pausable: true,
            };
            let app = App {
                snapshot: std::sync::Arc::new(snapshot),
                admin: std::sync::Arc::new(admin),
            };
            serve::start(addr, app, shutdown.clone()).await?;
        }
        let stats = follow(
            &follow_config,
            catalog,
            async move { shutdown.cancelled().await },
            |report| {
                if let Some(link) = &report.link {
                    meter.set_link(link);
                }
                for p in &report.partitions {
                    meter.round(
                        &p.topic,
                        p.partition,
                        RoundOutcome {
                            through: p.installed.iter().map(|i| i.next_offset).max(),
                            bytes: p.installed.iter().map(|i| i.log_bytes).sum(),
                            failed: matches!(
                                p.outcome,
                                PartitionOutcome::Refused(_) | PartitionOutcome::Failed { .. }
                            ),
                        },
                    );
                }
                for note in &report.notes {
                    if last_problem.insert(format!("note {note}"), String::new()).is_none() {
                        eprintln!("segmirror apply: {note}");
                    }
                }
                for k in &report.ignored_keys {
                    if last_problem
                        .insert(format!("key {:?}", k.key), k.reason.clone())
                        .is_none()
                    {
                        eprintln!("segmirror apply: warning: ignored {:?}: {}", k.key, k.reason);
                    }
                }
                match &report.link_meta {
                    Some(LinkMetaOutcome::Recorded {
                        version,
                        topics,
                        offsets,
                    }) => {
                        eprintln!(
                            "segmirror apply: link metadata version {version} recorded: {topics} topic(s), {offsets} \
                             group offset(s)"
                        );
                        last_problem.remove("link metadata");
                    }
                    Some(LinkMetaOutcome::Refused { reason })
                        if last_problem.insert("link metadata".into(), reason.clone()).as_ref() != Some(reason) =>
                    {
                        eprintln!("segmirror apply: link metadata refused: {reason}");
                    }
                    _ => {}
                }
                for p in &report.partitions {
                    if !p.installed.is_empty() {
                        let through = p.installed.iter().map(|i| i.next_offset).max().unwrap_or_default();
                        eprintln!(
                            "segmirror apply: {}: installed {} version(s), through offset {through}",
                            p.name(),
                            p.installed.len()
                        );
                    }
                    match (detail(p), &p.outcome) {
                        (Some(line), PartitionOutcome::Refused(_) | PartitionOutcome::Failed { .. }) => {
                            if last_problem.get(&p.name()) != Some(&line) {
                                eprintln!("segmirror apply: {}: {line}", p.name());
                                last_problem.insert(p.name(), line);
                            }
                        }
                        _ => {
                            last_problem.remove(&p.name());
                        }
                    }
                }
            },
        )
        .await;
        match stats {
            Ok(stats) => anyhow::Ok(stats),
            // Promoted or deleted: the link's end (`link_gate::end_on_closed` says so and exits 0).
            Err(segmirror_applier::Error::LinkClosed { link, state }) => Err(ClosedLink {
                name: link,
                state: state.parse().unwrap_or(segmirror_catalog::LinkState::Deleted),
                side: Side::Applier,
            }
            .into()),
            Err(e) => Err(e.into()),
        }
    })??;
    eprintln!(
        "segmirror apply: stopped after {} run(s): {} version(s) installed, {} byte(s) fetched",
        stats.runs, stats.segments_installed, stats.bytes_fetched
    );
    Ok(ExitCode::SUCCESS)
}

/// 2 when a partition failed, else 1 when a segment was refused, else 0.
pub fn exit_code(report: &ApplyReport) -> ExitCode {
    match report.verdict() {
        Verdict::Ok => ExitCode::SUCCESS,
        Verdict::Refused => ExitCode::from(EXIT_CORRUPT),
        Verdict::Failed => ExitCode::from(EXIT_USAGE_OR_IO),
    }
}

fn state_word(outcome: &PartitionOutcome) -> &'static str {
    match outcome {
        PartitionOutcome::Complete => "complete",
        PartitionOutcome::Waiting { .. } => "waiting",
        PartitionOutcome::Refused(_) => "REFUSED",
        PartitionOutcome::Skipped { .. } => "skipped",
        PartitionOutcome::Failed { .. } => "FAILED",
    }
}

/// The line under a partition's row, when there is something to explain.
fn detail(p: &PartitionReport) -> Option<String> {
    match &p.outcome {
        PartitionOutcome::Complete => None,
        PartitionOutcome::Waiting { reason, .. } => Some(format!("waiting: {reason}")),
        PartitionOutcome::Refused(r) => Some(format!(
            "refused segment {} ({}); nothing from there on was installed: {}",
            r.base_offset, r.manifest_key, r.refusal
        )),
        PartitionOutcome::Skipped { reason } => Some(format!("skipped: {reason}")),
        PartitionOutcome::Failed { error } => Some(format!("failed: {error}")),
    }
}

fn print_text(report: &ApplyReport, mirror: &std::path::Path, catalog: &std::path::Path) {
    for note in &report.notes {
        println!("note: {note}");
    }
    match &report.link_meta {
        Some(LinkMetaOutcome::Recorded {
            version,
            topics,
            offsets,
        }) => println!("link metadata version {version} recorded: {topics} topic(s), {offsets} group offset(s)"),
        Some(LinkMetaOutcome::Unchanged { version }) => println!("link metadata version {version}: recorded already"),
        Some(LinkMetaOutcome::Refused { reason }) => eprintln!("warning: link metadata refused: {reason}"),
        None => {}
    }
    for k in &report.ignored_keys {
        // Debug form: a key is untrusted text (a newline in it must not forge a line of this report).
        eprintln!("warning: ignored {:?}: {}", k.key, k.reason);
    }
    if let Some(reason) = &report.link_skipped {
        println!("link {}: skipped ({reason})", report.link.as_deref().unwrap_or("-"));
    }
    if report.staging_cleared {
        println!(
            "note: removed the staging directory an interrupted run left in {}",
            mirror.display()
        );
    }
    if !report.partitions.is_empty() {
        println!(
            "{:<40} {:<9} {:>9} {:>9} {:>8} {:>14} {:>14}",
            "partition", "state", "installed", "present", "removed", "bytes fetched", "bytes reused"
        );
    }
    for p in &report.partitions {
        let present = p
            .skipped
            .iter()
            .filter(|s| s.why == SkipSegment::AlreadyInstalled)
            .count();
        println!(
            "{:<40} {:<9} {:>9} {:>9} {:>8} {:>14} {:>14}",
            p.name(),
            state_word(&p.outcome),
            p.installed.len(),
            present,
            p.removed.len(),
            p.bytes_fetched,
            p.bytes_reused
        );
        if let Some(detail) = detail(p) {
            println!("  {detail}");
        }
    }
    let verdict = match report.verdict() {
        Verdict::Ok => "APPLIED",
        Verdict::Refused => "REFUSED",
        Verdict::Failed => "INCOMPLETE",
    };
    println!(
        "{verdict}: link '{}', {} partition(s) into {}: {} segment(s) installed, {} byte(s) fetched; catalog {}",
        report.link.as_deref().unwrap_or("-"),
        report.partitions.len(),
        mirror.display(),
        report.segments_installed(),
        report.bytes_fetched(),
        catalog.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use segmirror_applier::{Refusal, RefusedSegment};

    #[test]
    fn exit_codes_follow_the_verdict() {
        let mut report = ApplyReport::default();
        assert_eq!(exit_code(&report), ExitCode::SUCCESS);
        let mut p = PartitionReport {
            topic: "t".into(),
            partition: 0,
            source_topic_id: None,
            outcome: PartitionOutcome::Refused(RefusedSegment {
                base_offset: 5,
                manifest_key: "k".into(),
                refusal: Refusal::InvalidManifest { reason: "bad".into() },
            }),
            installed: Vec::new(),
            skipped: Vec::new(),
            removed: Vec::new(),
            bytes_fetched: 0,
            bytes_reused: 0,
        };
        report.partitions.push(p.clone());
        assert_eq!(exit_code(&report), ExitCode::from(EXIT_CORRUPT));
        assert!(detail(&p).unwrap().contains("refused segment 5 (k)"));
        p.outcome = PartitionOutcome::Failed { error: "disk".into() };
        report.partitions.push(p);
        assert_eq!(exit_code(&report), ExitCode::from(EXIT_USAGE_OR_IO));
    }
}
