//! `segmirror verify`: check Kafka data for corruption, the way a broker never does
//! on a clean start. Unlike Kafka's `DumpLogSegments`, findings set the exit code.

use std::path::PathBuf;
use std::process::ExitCode;

use segment_format::verify::{self, Depth, Progress, Report, Strictness, VerifyOptions};
use segmirror_applier::verify::{verify_paths, verify_recorded_transactions};
use segmirror_catalog::{canonical_mirror_root, Catalog};

use segmirror_transport::bucket::audit::{audit_store, AuditOptions, AuditReport};
use segmirror_transport::manifest::KeyPrefix;

use crate::cli::progress;
use crate::cli::report::{print_verify_report, verify_exit_code};
use crate::cli::runtime::Runtime;
use crate::cli::store::{is_store_url, S3Args};
use crate::cli::EXIT_CORRUPT;

#[derive(clap::Args)]
pub struct Args {
    /// Log dirs, mirror roots (segmirror's own lock, `.staging`, `.tail` and `.archive` there are skipped),
    /// partition dirs (`<topic>-<partition>`), single segment files (`.log`, `.index`, ...), or
    /// stores (`s3://bucket[/prefix]`, `file:///abs/path`) to audit the way a scrubber would: manifests against
    /// their data objects (sizes and SHA-256 re-computed), offset gaps and overlaps between consecutive segments,
    /// epochs moving backwards, topic IDs that changed, leases.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<std::ffi::OsString>,
    /// Key prefix inside the stores given (the one `seed --prefix` used).
    #[arg(long, value_name = "P", default_value = "")]
    prefix: String,
    #[command(flatten)]
    s3: S3Args,
    /// Also decompress every batch and check every record (lengths, varints, offset deltas, record count).
    #[arg(long)]
    deep: bool,
    /// Treat what a running broker legitimately leaves behind (a partial batch at the tail of the newest
    /// segment) as corruption instead of a warning.
    #[arg(long)]
    strict: bool,
    /// With --deep: the catalog of the mirror roots given (it must exist), whose record of how each installed
    /// segment's batches leave the transactions (what promotion trusts instead of reading the segments) is checked
    /// against those batches.
    #[arg(long, value_name = "PATH", requires = "deep")]
    catalog: Option<PathBuf>,
    /// Print one JSON document (summaries and every finding) instead of text. Paths are JSON strings: bytes of
    /// a file name that are not UTF-8 appear as U+FFFD.
    #[arg(long)]
    json: bool,
}

struct BarProgress(indicatif::ProgressBar);

impl Progress for BarProgress {
    fn advance(&self, bytes: u64) {
        self.0.inc(bytes);
    }
}

/// `runtime` is used only when a store is audited.
pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    let options = VerifyOptions {
        depth: if args.deep { Depth::Deep } else { Depth::Shallow },
        strictness: if args.strict {
            Strictness::Strict
        } else {
            Strictness::Lenient
        },
    };
    // Paths are taken as given, UTF-8 or not (a log dir may hold names Kafka never
    // creates); a store URL is text.
    let (stores, paths): (Vec<&std::ffi::OsString>, Vec<&std::ffi::OsString>) =
        args.paths.iter().partition(|p| p.to_str().is_some_and(is_store_url));
    let stores: Vec<&str> = stores.into_iter().filter_map(|s| s.to_str()).collect();
    let paths: Vec<PathBuf> = paths.into_iter().map(PathBuf::from).collect();
    let mut report = Report::default();
    if !paths.is_empty() {
        let total = verify::log_bytes_under(&paths);
        let bar = BarProgress(progress::byte_bar(total, "verifying"));
        // A path may be a mirror root: its lock, staging and tail state are segmirror's, not strays that stop a
        // broker (the mirror module knows them; a broker's log dir, with `meta.properties`, still has them reported).
        report = verify_paths(&paths, &options, &bar);
        bar.0.finish_and_clear();
    }
    if let Some(path) = &args.catalog {
        if !path.is_file() {
            anyhow::bail!("no catalog at {}", path.display());
        }
        let catalog = Catalog::open(path)?;
        // Only the mirror root the catalog belongs to: another root's partitions are not what it recorded.
        let bound = catalog.mirror_root()?;
        let roots: Vec<&PathBuf> = paths
            .iter()
            .filter(|p| bound.is_some() && canonical_mirror_root(p).ok() == bound)
            .collect();
        if roots.is_empty() {
            anyhow::bail!(
                "catalog {} belongs to mirror root {}, which is not among the paths given",
                path.display(),
                bound.map_or_else(|| "(none)".to_string(), |b| b.display().to_string())
            );
        }
        for root in roots {
            let (findings, io_errors) = verify_recorded_transactions(root, &catalog);
            report.findings.extend(findings);
            report.io_errors.extend(io_errors);
        }
    }
    let mut audits = Vec::new();
    for url in stores {
        match audit(url, &args, runtime) {
            Ok(audit) => audits.push(audit),
            Err(e) => report.io_errors.push(format!("{url}: {e:#}")),
        }
    }
    if args.json {
        print_json(&report, &audits)?;
    } else {
        for audit in &audits {
            print_audit(audit);
        }
        if !paths.is_empty() || audits.is_empty() {
            print_verify_report(&report);
        }
    }
    let audit_errors = audits.iter().any(|a| !a.is_sound());
    if audit_errors && report.io_errors.is_empty() {
        return Ok(ExitCode::from(EXIT_CORRUPT));
    }
    Ok(verify_exit_code(&report))
}

/// Audit one store: every manifest against its data objects (re-hashed), and with `--deep` every segment
/// downloaded and verified.
fn audit(url: &str, args: &Args, runtime: &Runtime) -> anyhow::Result<AuditReport> {
    let store = args.s3.open(url)?;
    let prefix = KeyPrefix::new(&args.prefix)?;
    let options = AuditOptions {
        verify_hashes: true,
        deep: args.deep,
        temp_dir: None,
    };
    Ok(runtime.block_on(audit_store(&store, &prefix, &options))??)
}

fn print_audit(audit: &AuditReport) {
    for f in &audit.findings {
        println!(
            "{} [{}]",
            f.finding,
            serde_json::to_value(f.check)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default()
        );
    }
    for p in &audit.partitions {
        for l in &p.lineages {
            let offsets = match (l.base_offset, l.next_offset) {
                (Some(a), Some(b)) => format!("{a}..{b}"),
                _ => "-".to_string(),
            };
            println!(
                "{}/{}-{} lineage {}: {} manifest(s), offsets {offsets}, {} bytes",
                p.link, p.topic, p.partition, l.topic_id, l.manifests, l.data_bytes
            );
        }
    }
    let verdict = if audit.is_sound() { "SOUND" } else { "CORRUPT" };
    println!(
        "{verdict}: store prefix '{}': {} object(s), {} bytes, {} error(s), {} warning(s)",
        audit.prefix,
        audit.objects,
        audit.bytes,
        audit.errors(),
        audit.warnings()
    );
}

/// The `--json` document. Paths are text; a byte of a file name that is not
/// UTF-8 appears as U+FFFD (see `segment_format::report::serialize_path_lossy`).
/// Serialized as a struct rather than with `json!`, which panics where
/// serializing fails.
#[derive(serde::Serialize)]
struct JsonReport<'a> {
    sound: bool,
    stores: &'a [AuditReport],
    errors: u64,
    warnings: u64,
    partitions: &'a [verify::PartitionSummary],
    findings: &'a [segment_format::report::Finding],
    suppressed_findings: u64,
    io_errors: &'a [String],
}

fn print_json(report: &Report, audits: &[AuditReport]) -> anyhow::Result<()> {
    let doc = JsonReport {
        sound: report.is_sound() && report.io_errors.is_empty() && audits.iter().all(|a| a.is_sound()),
        stores: audits,
        errors: report.errors(),
        warnings: report.warnings(),
        partitions: &report.partitions,
        findings: &report.findings,
        suppressed_findings: report.suppressed_findings,
        io_errors: &report.io_errors,
    };
    println!("{}", serde_json::to_string_pretty(&doc)?);
    Ok(())
}
