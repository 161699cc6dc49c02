//! `segmirror seed`: ship what Kafka log dirs hold to an object store, once —
//! to seed a new mirror or catch one up. Reruns ship only what is new. The flags,
//! the progress bar and the report; the seed itself is `segmirror_service::ship::seed`.
//!
//! Exit status: 0 when every selected partition is in the store, 1 when a
//! source segment was refused as corrupt (everything else still shipped), 2 on
//! any other failure (usage, an unusable log dir, the store, a fenced or
//! diverged partition).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use indicatif::ProgressBar;
use segment_format::verify::Depth;
use segmirror_service::ship::seed::{seed_once, SeedOnceConfig, SeedOutcome, Shipped};
use segmirror_shipper::bucket::seed::{PartitionStatus, Progress, SeedConfig, SeedReport};
use segmirror_shipper::link_meta::Published;
use segmirror_transport::Store;

use crate::cli::runtime::Runtime;
use crate::cli::store::S3Args;
use crate::cli::{progress, EXIT_CORRUPT, EXIT_USAGE_OR_IO};

/// The link name used when `--link` is not given.
pub const DEFAULT_LINK: &str = "default";

#[derive(clap::Args)]
pub struct Args {
    /// A source Kafka log dir (an entry of the broker's `log.dirs`). Repeat the flag for a broker with several.
    /// Segments are read, never modified; the broker may keep running.
    #[arg(long = "log-dir", value_name = "DIR", required = true)]
    log_dirs: Vec<PathBuf>,
    /// Where to ship: a local folder (a path or file:///absolute/path) or s3://bucket[/prefix]. S3 credentials
    /// come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN; AWS_REGION and
    /// AWS_ENDPOINT_URL are read too unless the flags below say otherwise.
    #[arg(long, value_name = "URL")]
    store: String,
    /// Topics to ship: a comma-separated list of topic names and regular expressions, each matching a whole
    /// topic name (as MirrorMaker 2's `topics`). Internal topics (`__consumer_offsets`, `__transaction_state`,
    /// anything `__*`) are never shipped, whatever the pattern.
    /// Default: the link record's topics regex (see --catalog), else every topic.
    #[arg(long, value_name = "REGEX")]
    topics: Option<String>,
    /// The source host's catalog holding this link's record (`segmirror link create`): a paused link ships
    /// nothing, a promoted or deleted one is refused, and its topics regex is the default of --topics. Default: the
    /// data directory's catalog.sqlite, if it records the link.
    #[arg(long, value_name = "PATH")]
    catalog: Option<PathBuf>,
    /// Name of the mirror link: the first key component under the prefix. Use the same name for every run
    /// (and for `apply`) that belongs to one mirror.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_LINK)]
    link: String,
    /// Key prefix inside the store, `/`-separated (e.g. to share a bucket or folder with other data).
    #[arg(long, value_name = "P", default_value = "")]
    prefix: String,
    #[command(flatten)]
    s3: S3Args,
    /// Before shipping a segment, also decompress every batch and check every record (slower; the default
    /// checks framing, every CRC, offsets and indexes).
    #[arg(long)]
    deep: bool,
    /// Partitions shipped at once (default: 8 to a local folder, 4 to S3, where each large upload buffers up to
    /// ~80 MiB).
    #[arg(long, value_name = "N", value_parser = super::parse_parallel)]
    parallel: Option<usize>,
    /// Who is shipping, recorded in leases and manifests (default: segmirror-seed@<host>:<pid>).
    #[arg(long, value_name = "ID")]
    shipper_id: Option<String>,
    /// The source broker's `metadata.log.dir` (holding `__cluster_metadata-0`); default: the first --log-dir
    /// holding it. The link's topics (partition counts, configs, ids) are read from it and uploaded with the link.
    #[arg(long, value_name = "DIR")]
    metadata_log_dir: Option<PathBuf>,
    /// Consumer groups whose committed offsets (from `__consumer_offsets` in the log dirs) the link carries, for
    /// the link's topics: a regular expression matching whole group ids.
    #[arg(long, value_name = "REGEX", default_value = segmirror_shipper::link_meta::ALL_GROUPS)]
    groups: String,
    /// A local file where the seed remembers what it found in each active segment (the file's device, inode,
    /// length and times, and its complete batches), so that a rerun skips reading a segment that has not changed
    /// since (a rerun with nothing new then reads no segment). Created if missing; a damaged one is ignored with a
    /// warning. Keep it on the source host; it is never uploaded. Default: seed-memory/<LINK>.json in the data
    /// directory ($SEGMIRROR_HOME, else $XDG_DATA_HOME/segmirror, else ~/.local/share/segmirror; none without one).
    #[arg(long, value_name = "FILE")]
    memory: Option<PathBuf>,
    /// Print the report as one JSON document instead of a table.
    #[arg(long)]
    json: bool,
}

/// A bar over the selected `.log` bytes, created once their total is known.
struct Bar {
    bar: OnceLock<ProgressBar>,
    segments: AtomicU64,
    total_segments: AtomicU64,
}

impl Bar {
    fn finish(&self) {
        if let Some(bar) = self.bar.get() {
            bar.finish_and_clear();
        }
    }
}

impl Progress for Bar {
    fn planned(&self, segments: u64, bytes: u64) {
        self.total_segments.fetch_add(segments, Ordering::Relaxed);
        // Hidden when stderr is not a terminal or the input is small.
        let bar = progress::byte_bar(bytes, "seeding");
        bar.set_message(format!("seeding 0/{segments} segments"));
        let _ = self.bar.set(bar);
    }

    fn advance(&self, bytes: u64) {
        if let Some(bar) = self.bar.get() {
            bar.inc(bytes);
        }
    }

    fn segment_done(&self) {
        let done = self.segments.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(bar) = self.bar.get() {
            let total = self.total_segments.load(Ordering::Relaxed);
            bar.set_message(format!("seeding {done}/{total} segments"));
        }
    }
}

fn bar() -> Bar {
    Bar {
        bar: OnceLock::new(),
        segments: AtomicU64::new(0),
        total_segments: AtomicU64::new(0),
    }
}

impl Args {
    fn config(&self) -> SeedOnceConfig {
        SeedOnceConfig {
            log_dirs: self.log_dirs.clone(),
            store: self.store.clone(),
            topics: self.topics.clone(),
            catalog: self.catalog.clone(),
            link: self.link.clone(),
            prefix: self.prefix.clone(),
            s3: self.s3.options(),
            depth: if self.deep { Depth::Deep } else { Depth::Shallow },
            parallel: self.parallel,
            shipper_id: self.shipper_id.clone(),
            metadata_log_dir: self.metadata_log_dir.clone(),
            groups: self.groups.clone(),
            memory: self.memory.clone(),
        }
    }
}

pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    let bar = bar();
    let outcome = seed_once(&args.config(), runtime, &bar);
    bar.finish();
    let (report, store, config, meta) = match outcome? {
        SeedOutcome::LinkPaused { link } => {
            eprintln!(
                "segmirror seed: link {link:?} is paused: nothing shipped (resume it with `segmirror link resume`)"
            );
            return Ok(ExitCode::SUCCESS);
        }
        SeedOutcome::Shipped(shipped) => {
            let Shipped {
                report,
                store,
                config,
                meta,
            } = *shipped;
            (report, store, config, meta)
        }
    };
    match meta {
        Some(Ok(Published::Version {
            version,
            topics,
            offsets,
        })) => eprintln!("link metadata version {version}: {topics} topic(s), {offsets} group offset(s)"),
        Some(Ok(Published::Unchanged)) => eprintln!("link metadata unchanged"),
        Some(Err(e)) => {
            eprintln!("segmirror seed: error: link metadata: {e}");
            return Ok(ExitCode::from(EXIT_USAGE_OR_IO));
        }
        None => {}
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report, &store, &config);
    }
    Ok(exit_code(&report))
}

/// 2 on any failure, else 1 if something was refused as corrupt, else 0.
pub fn exit_code(report: &SeedReport) -> ExitCode {
    if report.has_failures() {
        ExitCode::from(EXIT_USAGE_OR_IO)
    } else if report.has_refusals() {
        ExitCode::from(EXIT_CORRUPT)
    } else {
        ExitCode::SUCCESS
    }
}

fn status_word(status: &PartitionStatus) -> &'static str {
    match status {
        PartitionStatus::Complete => "complete",
        PartitionStatus::Refused { .. } => "REFUSED",
        PartitionStatus::Diverged { .. } => "DIVERGED",
        PartitionStatus::Failed { .. } => "FAILED",
    }
}

fn print_text(report: &SeedReport, store: &Store, config: &SeedConfig) {
    for e in &report.log_dir_errors {
        println!("error: {e}");
    }
    for s in &report.skipped {
        println!(
            "skipped {}-{} ({}): {}",
            s.topic,
            s.partition,
            s.path.display(),
            s.reason
        );
    }
    for p in &report.partitions {
        for w in &p.warnings {
            println!("{}: {w}", p.name());
        }
        match &p.status {
            PartitionStatus::Complete => {}
            PartitionStatus::Refused { base_offset, findings } => {
                let at = base_offset.map_or("its metadata".to_string(), |b| format!("segment {b}"));
                println!(
                    "refused {}: {at} is corrupt; nothing from there on was shipped",
                    p.name()
                );
                for f in findings {
                    println!("  {f}");
                }
            }
            PartitionStatus::Diverged {
                base_offset,
                shipped_next_offset,
                source_next_offset,
                reason,
            } => println!(
                "diverged {}: segment {base_offset}: the store holds offsets up to {shipped_next_offset}, the source \
                 up to {source_next_offset}: {reason}",
                p.name()
            ),
            PartitionStatus::Failed { kind, error } => println!("failed {} ({kind:?}): {error}", p.name()),
        }
    }
    if !report.partitions.is_empty() {
        println!(
            "{:<40} {:<9} {:>8} {:>8} {:>14} {:>14}",
            "partition", "status", "shipped", "present", "bytes sent", "through"
        );
    }
    for p in &report.partitions {
        let through = p.shipped_through.map_or("-".to_string(), |t| t.to_string());
        println!(
            "{:<40} {:<9} {:>8} {:>8} {:>14} {:>14}",
            p.name(),
            status_word(&p.status),
            p.segments_shipped,
            p.segments_already_shipped,
            p.bytes_uploaded,
            through
        );
    }
    let verdict = if report.has_failures() {
        "INCOMPLETE"
    } else if report.has_refusals() {
        "CORRUPT SOURCE"
    } else {
        "COMPLETE"
    };
    println!(
        "{verdict}: {} partition(s) to {store} (link '{}'{}): {} segment(s) shipped, {} already there, {} byte(s) \
         sent; {} skipped by rule, {} not selected",
        report.partitions.len(),
        config.link,
        if config.prefix.is_root() {
            String::new()
        } else {
            format!(", prefix '{}'", config.prefix)
        },
        report.segments_shipped(),
        report.segments_already_shipped(),
        report.bytes_uploaded(),
        report.skipped.len(),
        report.not_selected,
    );
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use segment_format::writer::sample::{write_sample, SampleOptions};

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn seed_cli(args: &[&str]) -> ExitCode {
        let cli = Cli::try_parse_from(std::iter::once("seed").chain(args.iter().copied())).unwrap();
        run(cli.args, &Runtime::new()).unwrap()
    }

    #[test]
    fn exit_status_follows_the_report() {
        let dir = tempfile::tempdir().unwrap();
        let log_dir = dir.path().join("kafka");
        let written = write_sample(
            &log_dir,
            &SampleOptions {
                fsync: false,
                ..Default::default()
            },
        )
        .unwrap();
        let bucket = dir.path().join("bucket");
        let (log, store) = (log_dir.to_str().unwrap(), bucket.to_str().unwrap());
        let ok = seed_cli(&[
            "--log-dir",
            log,
            "--store",
            store,
            "--topics",
            "sample-codecs",
            "--json",
        ]);
        assert_eq!(ok, ExitCode::SUCCESS);
        assert!(bucket.join(DEFAULT_LINK).join("sample-codecs").is_dir());

        // Corrupt a sealed segment of a partition not shipped yet: refused, exit 1.
        let victim = &written.partition("sample-legacy", 0).unwrap().written;
        let path = victim.dir.join(segment_format::dir::segment_file_name(
            victim.segments[0].base_offset,
            segment_format::dir::SegmentFileKind::Log,
        ));
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        let refused = seed_cli(&["--log-dir", log, "--store", store, "--link", "default"]);
        assert_eq!(refused, ExitCode::from(EXIT_CORRUPT));

        // An unusable setting is an error before anything is read.
        let cli = Cli::try_parse_from(["seed", "--log-dir", log, "--store", store, "--topics", "("]).unwrap();
        assert!(run(cli.args, &Runtime::new()).is_err());
        let cli = Cli::try_parse_from(["seed", "--log-dir", log, "--store", store, "--link", "a/b"]).unwrap();
        assert!(run(cli.args, &Runtime::new()).is_err());
    }
}
