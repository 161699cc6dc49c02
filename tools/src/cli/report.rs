//! Report printing more than one command shows: the summary of generated sample partitions (`generate`, `demo`),
//! a verify report with its exit code (`verify`, `demo`), an error with its causes on one line (every command's
//! `segmirror: error:` line), and the end of a long-running service whose link closed ([`end_on_closed`]).
//!
//! Why here: `demo` prints what `generate` and `verify` print, word for word; sharing the printer keeps the two
//! outputs identical without one command importing another.

use std::process::ExitCode;

use segment_format::report::Severity;
use segment_format::verify::Report;
use segment_format::writer::sample::Manifest;

pub use segmirror_service::error_line;
use segmirror_service::link_gate::ClosedLink;

use super::{EXIT_CORRUPT, EXIT_USAGE_OR_IO};

/// One line per partition, then the totals.
pub fn print_sample_summary(manifest: &Manifest, seconds: f64) {
    println!(
        "{:<32} {:<16} {:>8} {:>9} {:>10} {:>13} {:>21}",
        "partition", "shape", "segments", "batches", "records", "bytes", "offsets [start,end)"
    );
    for p in &manifest.partitions {
        let w = &p.written;
        println!(
            "{:<32} {:<16} {:>8} {:>9} {:>10} {:>13} {:>21}",
            format!("{}-{}", w.topic, w.partition),
            p.shape,
            w.segments.len(),
            w.batches(),
            p.data_records,
            w.log_bytes(),
            format!("{}..{}", w.log_start_offset, w.log_end_offset),
        );
    }
    let bytes = manifest.total_log_bytes();
    let rate = if seconds > 0.0 {
        bytes as f64 / seconds / (1024.0 * 1024.0)
    } else {
        0.0
    };
    println!(
        "wrote {} partition(s), {bytes} bytes of log data, into {} in {seconds:.2}s ({rate:.0} MiB/s)",
        manifest.partitions.len(),
        manifest.log_dir.display(),
    );
}

/// 2 if anything could not be read, else 1 if corruption was found, else 0.
pub fn verify_exit_code(report: &Report) -> ExitCode {
    if !report.io_errors.is_empty() {
        ExitCode::from(EXIT_USAGE_OR_IO)
    } else if !report.is_sound() {
        ExitCode::from(EXIT_CORRUPT)
    } else {
        ExitCode::SUCCESS
    }
}

/// The verify report as text: findings, one line per partition, then the verdict.
pub fn print_verify_report(report: &Report) {
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

/// The end of a long-running service's run: a [`ClosedLink`] anywhere in the error's chain is the link's expected
/// end, said in one line (`segmirror ROLE: link "x" is promoted: ...; stopped`) and exit 0; any other outcome is
/// returned as it is.
pub fn end_on_closed(role: &str, result: anyhow::Result<ExitCode>) -> anyhow::Result<ExitCode> {
    let e = match result {
        Ok(code) => return Ok(code),
        Err(e) => e,
    };
    let Some(closed) = e.chain().find_map(|c| c.downcast_ref::<ClosedLink>()) else {
        return Err(e);
    };
    tracing::info!(link = %closed.name, state = %closed.state, "the link is closed: stopping");
    eprintln!("segmirror {role}: {closed}; stopped");
    Ok(ExitCode::SUCCESS)
}
