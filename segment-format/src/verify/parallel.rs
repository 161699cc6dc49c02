//! The partitions of a log dir verified side by side, reported as if one after the other.
//!
//! Why: a log dir of many small partitions (hundreds of partitions of a few MiB, ~1 KiB batches) kept one core
//! busy and the other idle. Within a file the CRC work is shared with a helper thread only from
//! [`PARALLEL_MIN_BYTES`](crate::log::PARALLEL_MIN_BYTES) up (starting the helper costs more than it saves on a
//! smaller file), and partitions were verified one at a time, so `verify` read such a dir at 0.4x `cat`.
//!
//! How: up to one worker per available core takes the next unverified partition from a shared counter; each
//! partition is verified into a report of its own, and the reports are merged in the log dir's order once all are
//! done, so output, findings, counts and exit status are what a one-at-a-time run gives. Inside a worker the scan
//! runs without its CRC helper (see [`crate::log::without_crc_helper`]): the workers already keep every core busy,
//! and a helper per worker would only add thread switches. A log dir of one partition, or a one-CPU machine, takes
//! the one-at-a-time path, with the helper. Memory stays bounded as before: each worker holds one partition's scan
//! (two chunks), and the kept findings are capped per file as they always were.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::*;

/// One partition of a log dir to verify.
pub(super) struct PartitionJob {
    pub path: PathBuf,
    pub log_start_offset: Option<i64>,
}

/// What verifying one partition found: its own report (findings and their cap applied per file) and its summary.
struct PartitionOutcome {
    report: Report,
    result: Result<PartitionSummary, Error>,
}

/// Workers for `jobs` partitions: one per available core, never more than there are partitions.
fn workers_for(jobs: usize) -> usize {
    #[cfg(test)]
    if let Some(n) = tests::WORKERS.get() {
        return n.min(jobs);
    }
    std::thread::available_parallelism().map_or(1, |n| n.get()).min(jobs)
}

/// Verify every job's partition, several at a time when cores allow, and add the outcomes to `sink` and
/// `partitions` in the order of `jobs`.
pub(super) fn verify_partitions(
    jobs: &[PartitionJob],
    options: &VerifyOptions,
    progress: &dyn Progress,
    sink: &mut Findings<'_>,
    partitions: &mut Vec<PartitionSummary>,
) {
    let workers = workers_for(jobs.len());
    if workers <= 1 {
        for job in jobs {
            match verify_partition_dir(&job.path, job.log_start_offset, options, progress, sink) {
                Ok(summary) => partitions.push(summary),
                Err(e) => sink.report.io_errors.push(e.to_string()),
            }
        }
        return;
    }
    for (job, outcome) in jobs.iter().zip(run_workers(jobs, workers, options, progress)) {
        let outcome = outcome.unwrap_or_else(|| PartitionOutcome {
            report: Report::default(),
            result: Err(Error::io(
                &job.path,
                std::io::Error::other("the thread verifying this partition panicked"),
            )),
        });
        merge(outcome, sink, partitions);
    }
}

/// Run `workers` threads over `jobs`; the outcome of job `i` at index `i` (`None` if its thread panicked).
fn run_workers(
    jobs: &[PartitionJob],
    workers: usize,
    options: &VerifyOptions,
    progress: &dyn Progress,
) -> Vec<Option<PartitionOutcome>> {
    let next = AtomicUsize::new(0);
    let outcomes: Mutex<Vec<Option<PartitionOutcome>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                crate::log::without_crc_helper(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    let outcome = verify_alone(job, options, progress);
                    if let Ok(mut slots) = outcomes.lock() {
                        slots[i] = Some(outcome);
                    }
                })
            });
        }
    });
    outcomes.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Verify one partition into a report of its own.
fn verify_alone(job: &PartitionJob, options: &VerifyOptions, progress: &dyn Progress) -> PartitionOutcome {
    let mut report = Report::default();
    let result = {
        let mut sink = Findings::new(&mut report);
        verify_partition_dir(&job.path, job.log_start_offset, options, progress, &mut sink)
    };
    PartitionOutcome { report, result }
}

/// Add one partition's outcome to the log dir's report, as verifying it in place would have: its findings pass
/// through `sink` again (the per-file cap is the same; files belong to one partition), its summary already holds
/// its counts.
fn merge(outcome: PartitionOutcome, sink: &mut Findings<'_>, partitions: &mut Vec<PartitionSummary>) {
    let PartitionOutcome { report, result } = outcome;
    sink.extend(report.findings);
    sink.report.suppressed_findings += report.suppressed_findings;
    sink.report.io_errors.extend(report.io_errors);
    // The summary carries the partition's counts; the ones just counted again are dropped.
    sink.take_counts();
    match result {
        Ok(summary) => partitions.push(summary),
        Err(e) => sink.report.io_errors.push(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::path::Path;

    use super::*;
    use crate::writer::sample::{write_sample, SampleOptions};

    std::thread_local! {
        /// Workers a test asks for instead of one per core.
        pub(super) static WORKERS: Cell<Option<usize>> = const { Cell::new(None) };
    }

    fn verify_with(workers: usize, dir: &Path, options: &VerifyOptions) -> String {
        WORKERS.set(Some(workers));
        let report = verify_paths(&[dir.to_path_buf()], options, &NoProgress);
        WORKERS.set(None);
        serde_json::to_string_pretty(&report).unwrap()
    }

    /// Every `.log` of the partition dirs whose names start with `prefix`, largest first.
    fn logs(dir: &Path) -> Vec<PathBuf> {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir())
            .flat_map(|e| std::fs::read_dir(e.path()).unwrap().flatten().map(|f| f.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "log") && std::fs::metadata(p).unwrap().len() > 200)
            .collect();
        logs.sort();
        logs
    }

    /// Corrupt partitions verified four at a time give the report, byte for byte in JSON, that one at a time
    /// gives: same findings in the same order, same summaries, same io errors.
    #[test]
    fn parallel_partitions_report_what_one_at_a_time_reports() {
        let tmp = tempfile::tempdir().unwrap();
        write_sample(
            tmp.path(),
            &SampleOptions {
                fsync: false,
                ..SampleOptions::default()
            },
        )
        .unwrap();
        let logs = logs(tmp.path());
        assert!(logs.len() >= 6, "{logs:?}");
        // A flipped byte inside a batch (a CRC error) in three partitions, a cut index in another one, and a
        // partition whose .log is a directory (an io error, not a finding).
        for log in logs.iter().step_by(logs.len() / 3).take(3) {
            let mut bytes = std::fs::read(log).unwrap();
            bytes[100] ^= 0x40;
            std::fs::write(log, bytes).unwrap();
        }
        let index = logs[1].with_extension("index");
        let len = std::fs::metadata(&index).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&index)
            .unwrap()
            .set_len(len.saturating_sub(3))
            .unwrap();
        for options in [
            VerifyOptions::default(),
            VerifyOptions {
                depth: Depth::Deep,
                strictness: Strictness::Strict,
            },
        ] {
            let one = verify_with(1, tmp.path(), &options);
            let four = verify_with(4, tmp.path(), &options);
            assert_eq!(one, four);
            let report: serde_json::Value = serde_json::from_str(&four).unwrap();
            let crc_errors = report["findings"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f.to_string().contains("CRC") || f.to_string().contains("crc"))
                .count();
            assert!(crc_errors >= 3, "{four}");
            let erroneous = report["partitions"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["errors"] != 0)
                .count();
            assert!(erroneous >= 3, "{four}");
        }
    }

    /// A partition that cannot be verified at all is reported in the log dir's order with the others.
    #[test]
    fn unreadable_partition_keeps_its_place() {
        let tmp = tempfile::tempdir().unwrap();
        write_sample(
            tmp.path(),
            &SampleOptions {
                fsync: false,
                ..SampleOptions::default()
            },
        )
        .unwrap();
        let logs = logs(tmp.path());
        let victim = &logs[logs.len() / 2];
        std::fs::remove_file(victim).unwrap();
        std::fs::create_dir(victim).unwrap();
        let one = verify_with(1, tmp.path(), &VerifyOptions::default());
        let three = verify_with(3, tmp.path(), &VerifyOptions::default());
        assert_eq!(one, three);
        assert!(
            three.contains(&*victim.file_name().unwrap().to_string_lossy()),
            "{three}"
        );
    }
}
