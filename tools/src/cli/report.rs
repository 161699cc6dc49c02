//! Report printing more than one command shows: the summary of generated sample partitions (`generate`, `demo`),
//! a verify report with its exit code (`verify`, `demo`), and an error with its causes on one line (every
//! command's `segmirror: error:` line).
//!
//! Why here: `demo` prints what `generate` and `verify` print, word for word; sharing the printer keeps the two
//! outputs identical without one command importing another.

use std::process::ExitCode;

use segment_format::report::Severity;
use segment_format::verify::Report;
use segment_format::writer::sample::Manifest;

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

/// An error and its causes on one line, each cause once: `what failed: why: root cause`.
///
/// Why not anyhow's `{:#}`: many errors already embed their source's text in their own message (a `thiserror`
/// message with `{source}`, a context written as `format!("...: {e}")`), and `{:#}` prints that text again for
/// every link of the chain, so one cause was read two or three times on a line. A cause whose text an earlier part
/// of the line already holds adds nothing and is left out; every other cause is kept, in order.
pub fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if text.is_empty() || line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

#[cfg(test)]
mod tests {
    use anyhow::Context as _;

    use super::error_line;

    #[derive(Debug)]
    struct Embeds(std::io::Error);

    impl std::fmt::Display for Embeds {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cannot open catalog /x: {}", self.0)
        }
    }

    impl std::error::Error for Embeds {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn each_cause_is_named_once() {
        let io = || std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        // A source that embeds its cause, under a context: `{:#}` names "no such file" twice.
        let e = Err::<(), _>(Embeds(io())).context("opening catalog /x").unwrap_err();
        assert_eq!(format!("{e:#}").matches("no such file").count(), 2);
        assert_eq!(
            error_line(&e),
            "opening catalog /x: cannot open catalog /x: no such file"
        );
        // A chain of distinct causes is kept whole, in order.
        let e = Err::<(), _>(io())
            .context("reading x")
            .context("loading y")
            .unwrap_err();
        assert_eq!(error_line(&e), "loading y: reading x: no such file");
        // A context that repeats its source's whole text keeps the longer one.
        let e = Err::<(), _>(io()).context("reading x: no such file").unwrap_err();
        assert_eq!(error_line(&e), "reading x: no such file");
    }
}
