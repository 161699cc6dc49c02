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
use segmirror_applier::bucket::follow::DEFAULT_POLL_INTERVAL;
use segmirror_applier::report::LinkMetaOutcome;
use segmirror_applier::{ApplyReport, PartitionOutcome, Progress, SkipSegment, Verdict};
use segmirror_service::apply::bucket::{detail, BucketApplyConfig, BucketApplyService};

use crate::cli::catalog::CATALOG_HELP;
use crate::cli::metrics::MetricsArgs;
use crate::cli::runtime::Runtime;
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

impl Args {
    fn config(&self) -> BucketApplyConfig {
        BucketApplyConfig {
            store: self.store.clone(),
            mirror: self.mirror.clone(),
            link: self.link.clone(),
            prefix: self.prefix.clone(),
            catalog: self.catalog.clone(),
            s3: self.s3.options(),
            deep: self.deep,
            parallel: self.parallel,
            wait: self.wait,
            poll_interval_ms: self.poll_interval_ms,
            metrics_addr: self.metrics.metrics_addr.clone(),
        }
    }
}

pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    let service = BucketApplyService::open(args.config())?;
    if args.metrics.metrics_addr.is_some() && !args.follow {
        anyhow::bail!("--metrics-addr is for a process that keeps running: give --follow too");
    }
    if args.follow {
        let stats = runtime.block_on(async {
            let shutdown = crate::cli::link::shutdown_on_signal()?;
            service.follow(shutdown).await
        })??;
        eprintln!(
            "segmirror apply: stopped after {} run(s): {} version(s) installed, {} byte(s) fetched",
            stats.runs, stats.segments_installed, stats.bytes_fetched
        );
        return Ok(ExitCode::SUCCESS);
    }
    let catalog_path = service.catalog_path().to_path_buf();
    let bar = Bar::default();
    let report = service.run_once(runtime, &bar)?;
    bar.finish();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report, &args.mirror, &catalog_path);
    }
    Ok(exit_code(&report))
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
    use segmirror_applier::{PartitionReport, Refusal, RefusedSegment};

    use super::*;

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
