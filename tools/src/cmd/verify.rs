//! `segmirror verify`: check Kafka data for corruption, the way a broker never does
//! on a clean start. Unlike Kafka's `DumpLogSegments`, findings set the exit code.

use std::path::PathBuf;
use std::process::ExitCode;

use segment_format::report::Severity;
use segment_format::verify::{self, Progress, Report, VerifyOptions};

use crate::{progress, EXIT_CORRUPT, EXIT_USAGE_OR_IO};

#[derive(clap::Args)]
pub struct Args {
    /// Log dirs, partition dirs (`<topic>-<partition>`) or single segment files (`.log`, `.index`, ...).
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Also decompress every batch and check every record (lengths, varints, offset deltas, record count).
    #[arg(long)]
    deep: bool,
    /// Treat what a running broker legitimately leaves behind (a partial batch at the tail of the newest
    /// segment) as corruption instead of a warning.
    #[arg(long)]
    strict: bool,
    /// Print one JSON document (summaries and every finding) instead of text.
    #[arg(long)]
    json: bool,
}

struct BarProgress(indicatif::ProgressBar);

impl Progress for BarProgress {
    fn advance(&self, bytes: u64) {
        self.0.inc(bytes);
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let options = VerifyOptions {
        deep: args.deep,
        strict: args.strict,
    };
    let total = verify::log_bytes_under(&args.paths);
    let bar = BarProgress(progress::byte_bar(total, "verifying"));
    let report = verify::verify_paths(&args.paths, &options, &bar);
    bar.0.finish_and_clear();
    if args.json {
        print_json(&report)?;
    } else {
        print_text(&report);
    }
    Ok(exit_code(&report))
}

/// 2 if anything could not be read, else 1 if corruption was found, else 0.
pub fn exit_code(report: &Report) -> ExitCode {
    if !report.io_errors.is_empty() {
        ExitCode::from(EXIT_USAGE_OR_IO)
    } else if !report.is_sound() {
        ExitCode::from(EXIT_CORRUPT)
    } else {
        ExitCode::SUCCESS
    }
}

fn print_json(report: &Report) -> anyhow::Result<()> {
    let doc = serde_json::json!({
        "sound": report.is_sound() && report.io_errors.is_empty(),
        "errors": report.errors(),
        "warnings": report.warnings(),
        "partitions": report.partitions,
        "findings": report.findings,
        "suppressed_findings": report.suppressed_findings,
        "io_errors": report.io_errors,
    });
    println!("{}", serde_json::to_string_pretty(&doc)?);
    Ok(())
}

pub fn print_text(report: &Report) {
    for finding in &report.findings {
        println!("{finding}");
    }
    if report.suppressed_findings > 0 {
        println!("... {} more findings not shown", report.suppressed_findings);
    }
    for e in &report.io_errors {
        println!("error: {e}");
    }
    if !report.partitions.is_empty() {
        println!(
            "{:<40} {:>8} {:>10} {:>12} {:>14} {:>21} {:>5} {:>5}",
            "partition", "segments", "batches", "records", "bytes", "offsets", "warn", "err"
        );
    }
    for p in &report.partitions {
        let name = match (&p.topic, p.partition) {
            (Some(t), Some(n)) => format!("{t}-{n}"),
            _ => p.path.display().to_string(),
        };
        let offsets = match (p.first_offset, p.last_offset) {
            (Some(a), Some(b)) => format!("{a}..{b}"),
            _ => "-".to_string(),
        };
        println!(
            "{:<40} {:>8} {:>10} {:>12} {:>14} {:>21} {:>5} {:>5}",
            name, p.segments, p.batches, p.records, p.bytes, offsets, p.warnings, p.errors
        );
    }
    let verdict = if !report.io_errors.is_empty() {
        "UNREADABLE"
    } else if report.is_sound() {
        "SOUND"
    } else {
        "CORRUPT"
    };
    let errors =
        report.findings.iter().filter(|f| f.severity == Severity::Error).count() as u64 + report.suppressed_findings;
    println!(
        "{verdict}: {} partition(s), {} error(s), {} warning(s)",
        report.partitions.len(),
        errors,
        report.warnings()
    );
}
