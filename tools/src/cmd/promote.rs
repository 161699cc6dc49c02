//! `segmirror promote`: hand mirror partitions to a stopped Kafka broker (see `segmirror_applier::promote` for what
//! is installed, why leader epochs are restamped, and how a crash is recovered). Argument parsing and output only.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use segmirror_applier::promote::{self, Outcome, PromoteReport, PromoteRequest, ReplicaOutcome};

use crate::cli::catalog::{open_catalog_of_missing_mirror, open_mirror_catalog, CATALOG_HELP};
use crate::cli::EXIT_USAGE_OR_IO;

/// What `--help` says about retention.
const RETENTION_HELP: &str = "\
Retention: promoted records keep the source's timestamps. Promotion predicts what the target topic's retention \
(retention.ms / retention.bytes, else the broker's log.retention.* settings, else Kafka's defaults of 168 hours and \
no size limit) would delete at the broker's first retention check, reading the topic's configs and the dynamic \
broker configs from the target's metadata log (__cluster_metadata-0 in metadata.log.dir, by default the first log \
dir). Static broker settings come from --target-config; without it Kafka's defaults are assumed. It refuses, naming \
the partitions, segments, offsets and timestamps, unless --allow-retention-delete is given; then the report lists \
what the broker will delete.";

/// What `--help` says about exit status.
const EXIT_HELP: &str = "\
Exit status: 0 promoted (or nothing left to do); 2 refused (every reason for every partition is listed, and \
nothing was changed: a running broker, a missing mirror root, an unknown --link, target partitions that hold data, \
retention, ...) or a usage or I/O error.";

fn after_help() -> String {
    format!("{RETENTION_HELP}\n\n{EXIT_HELP}\n\n{CATALOG_HELP}")
}

#[derive(clap::Args)]
#[command(after_help = after_help())]
pub struct Args {
    /// The mirror root the applier installs into (`segmirror apply --mirror`).
    #[arg(long, value_name = "DIR")]
    mirror: PathBuf,
    /// The target broker's log dir (one entry of its `log.dirs`). The broker must be stopped, and the topics must
    /// exist there with as many partitions as the mirror (create them on the target cluster first). Give it once
    /// per replica (each stopped broker's log dir) to install one plan into all of them: each partition goes into
    /// every named log dir that holds its directory (the brokers the target cluster assigned it to), with the same
    /// bytes (the highest leader epoch of all replicas); with --handover rename the mirror's files are renamed
    /// into the last of them and copied into the others.
    #[arg(long, value_name = "DIR", required = true)]
    log_dir: Vec<PathBuf>,
    /// Promote only the topics whose whole name matches this regular expression (default: every topic of the
    /// link).
    #[arg(long, value_name = "REGEX")]
    topics: Option<String>,
    /// The catalog `segmirror apply` recorded the mirror in. See below for the default.
    #[arg(long, value_name = "PATH")]
    catalog: Option<PathBuf>,
    /// The link whose partitions are promoted; needed when the catalog holds more than one.
    #[arg(long, value_name = "NAME")]
    link: Option<String>,
    /// Replace target partitions that already hold data (their records are lost).
    #[arg(long)]
    force: bool,
    /// The target broker's server.properties, for its static log.retention.* defaults and metadata.log.dir
    /// (without it Kafka's defaults are assumed).
    #[arg(long, value_name = "PATH")]
    target_config: Option<PathBuf>,
    /// Promote even where the target topic's retention would delete promoted data at start (or cannot be read);
    /// the report says what the broker will delete.
    #[arg(long)]
    allow_retention_delete: bool,
    /// How many partitions are copied at once (each file is still fsynced before its partition is renamed into
    /// place; the crash protocol is the same).
    #[arg(long, value_name = "N", default_value_t = u16::try_from(promote::DEFAULT_PARALLEL).unwrap_or(1),
          value_parser = clap::value_parser!(u16).range(1..=256))]
    parallel: u16,
    /// How the mirror's files reach the log dir: `copy` (the mirror keeps them), `rename` (hand them over: the
    /// promotion no longer grows with the data, but the mirror gives its files up; mirror and log dir must share a
    /// file system) or `auto` (rename when they share one and every partition of the link is promoted, else copy).
    #[arg(long, value_name = "MODE", default_value = "copy", value_parser = ["copy", "rename", "auto"])]
    handover: String,
    /// Cut every partition at one source moment: before its first batch whose max timestamp is newer than
    /// TIMESTAMP (milliseconds since the epoch, or RFC 3339 such as 2026-12-02T17:00:00Z). The batch's stored max
    /// timestamp counts, whatever the topic's timestamp type (LogAppendTime: the source broker's append time;
    /// CreateTime: the producer's). Later batches are left behind even when older (the log stays a contiguous
    /// prefix); a transaction open at the cut is aborted there. The report says per partition what was left.
    #[arg(long, value_name = "TIMESTAMP", value_parser = promote::parse_cut_timestamp)]
    consistent_cut: Option<i64>,
    /// Print one JSON document (the report, or the refusals) instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let topics = args
        .topics
        .as_deref()
        .map(promote::topics_regex)
        .transpose()
        .context("--topics is not a valid regular expression")?;
    // A missing mirror root is one refusal among all the others (the library reports them together); its catalog
    // is only read, never bound to the mistyped root.
    let (_, mut catalog) = if args.mirror.exists() {
        open_mirror_catalog(args.catalog, &args.mirror, true)?
    } else {
        open_catalog_of_missing_mirror(args.catalog, &args.mirror)?
    };
    let mut log_dirs = args.log_dir.into_iter();
    let log_dir = log_dirs.next().context("--log-dir is required")?;
    // The rest: fields that exist only with the applier's `failpoints` feature (crash tests), never set here.
    #[allow(clippy::needless_update)]
    let request = PromoteRequest {
        mirror_root: args.mirror,
        log_dir,
        replica_log_dirs: log_dirs.collect(),
        link: args.link,
        topics,
        force: args.force,
        target_config: args.target_config,
        allow_retention_delete: args.allow_retention_delete,
        parallel: usize::from(args.parallel),
        handover: args.handover.parse().map_err(anyhow::Error::msg)?,
        consistent_cut: args.consistent_cut,
        ..PromoteRequest::default()
    };
    match promote::promote(&request, &mut catalog) {
        Ok(report) => {
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print_text(&report);
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(promote::Error::Refused { refusals }) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({ "refused": refusals }))?
                );
            }
            eprintln!("segmirror promote: refused, nothing changed:");
            for r in &refusals {
                eprintln!("  - {r}");
            }
            Ok(ExitCode::from(EXIT_USAGE_OR_IO))
        }
        Err(e) => Err(anyhow::Error::new(e).context("promotion failed; run the same command again to finish it")),
    }
}

/// Where a partition was cut and what was left behind (the consistent cut's offsets, batches and bytes, and the
/// reason), in one line.
fn cut_summary(p: &promote::PromotedPartition) -> String {
    let mirror_end = p.mirror_end_offset.map_or_else(|| "?".to_string(), |o| o.to_string());
    match &p.consistent_cut {
        Some(c) => format!(
            "cut at offset {} of the mirror's {mirror_end} (consistent cut at {} ms); left behind offsets [{}, {}): \
             {} batch(es), {} bytes, because the batch at offset {} has max timestamp {} > {}",
            c.cut_offset,
            c.timestamp_ms,
            c.cut_offset,
            c.mirror_end_offset,
            c.left_batches,
            c.left_bytes,
            c.first_left_offset,
            c.first_left_timestamp,
            c.timestamp_ms
        ),
        None => format!("cut at the mirror's end, offset {mirror_end}: nothing left behind"),
    }
}

fn print_text(report: &PromoteReport) {
    for note in &report.notes {
        println!("note: {note}");
    }
    for loss in &report.retention_deletes {
        println!("retention: {loss}");
    }
    for p in &report.partitions {
        let name = format!("{}-{}", p.topic, p.partition);
        let end = p.log_end_offset.map_or_else(|| "?".to_string(), |o| o.to_string());
        match p.outcome {
            Outcome::AlreadyPromoted => println!("{name}: already promoted (offsets up to {end})"),
            Outcome::Promoted | Outcome::Resumed => {
                println!(
                "{name}: {} offsets [{}, {end}) in {} segment(s), {} bytes{}; {} batch(es) restamped to leader epoch \
                 {}; topic id {}",
                if p.outcome == Outcome::Resumed { "finished promoting" } else { "promoted" },
                p.log_start_offset,
                p.segments,
                p.log_bytes,
                if p.handed_over { " handed over by rename (the mirror no longer holds them)" } else { "" },
                p.batches_restamped,
                p.leader_epoch.map_or_else(|| "?".to_string(), |e| e.to_string()),
                p.target_topic_id.as_deref().unwrap_or("?"),
            );
                println!("{name}: {}", cut_summary(p));
                for t in &p.transactions_aborted {
                    println!(
                        "{name}: aborted the transaction open at the cut: producer id {} (epoch {}), open since \
                         offset {}, {} record(s) in {} batch(es), {} bytes (a read_committed consumer skips them); \
                         ABORT marker at offset {}",
                        t.producer_id, t.producer_epoch, t.first_offset, t.records, t.batches, t.bytes, t.marker_offset
                    );
                }
            }
        }
    }
    for r in &report.log_dirs {
        let what = match r.outcome {
            ReplicaOutcome::Installed => "installed",
            ReplicaOutcome::Resumed => "finished installing",
            ReplicaOutcome::FinishedEarlier => "already finished by the interrupted run (same plan, same bytes)",
        };
        println!(
            "log dir {}: {what}: {} partition(s), {} bytes",
            r.log_dir.display(),
            r.partitions,
            r.log_bytes
        );
    }
    if report.log_dirs.len() > 1 {
        println!(
            "{} partition(s) promoted into {} log dirs from link {:?}; start the brokers",
            report.changed(),
            report.log_dirs.len(),
            report.link
        );
    } else {
        println!(
            "{} partition(s) promoted into {} from link {:?}; start the broker",
            report.changed(),
            report.log_dir.display(),
            report.link
        );
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use promote::{ConsistentCut, Outcome, PromotedPartition};

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn parse(extra: &[&str]) -> Result<Args, clap::Error> {
        let base = ["segmirror", "--mirror", "m", "--log-dir", "l"];
        Cli::try_parse_from(base.iter().chain(extra)).map(|c| c.args)
    }

    #[test]
    fn log_dir_is_required_and_may_be_given_once_per_replica() {
        assert_eq!(parse(&[]).unwrap().log_dir, [PathBuf::from("l")]);
        let several = parse(&["--log-dir", "b", "--log-dir", "c"]).unwrap();
        assert_eq!(several.log_dir, ["l", "b", "c"].map(PathBuf::from));
        assert!(Cli::try_parse_from(["segmirror", "--mirror", "m"]).is_err());
    }

    #[test]
    fn consistent_cut_takes_milliseconds_or_rfc_3339_and_refuses_anything_else() {
        assert_eq!(parse(&[]).unwrap().consistent_cut, None);
        let ms = parse(&["--consistent-cut", "1700000000123"]).unwrap();
        assert_eq!(ms.consistent_cut, Some(1_700_000_000_123));
        let rfc = parse(&["--consistent-cut", "2023-11-14T22:13:20.123Z"]).unwrap();
        assert_eq!(rfc.consistent_cut, Some(1_700_000_000_123));
        let err = parse(&["--consistent-cut", "noon"]).err().unwrap().to_string();
        assert!(err.contains("RFC 3339"), "{err}");
    }

    #[test]
    fn the_cut_line_says_where_and_what_was_left_behind() {
        let mut p = PromotedPartition {
            topic: "t".into(),
            partition: 0,
            outcome: Outcome::Promoted,
            target_topic_id: None,
            leader_epoch: Some(1),
            log_start_offset: 0,
            log_end_offset: Some(41),
            mirror_end_offset: Some(40),
            consistent_cut: None,
            segments: 1,
            log_bytes: 100,
            batches_restamped: 1,
            handed_over: false,
            transactions_aborted: Vec::new(),
            log_dirs: Vec::new(),
        };
        assert_eq!(
            cut_summary(&p),
            "cut at the mirror's end, offset 40: nothing left behind"
        );
        p.mirror_end_offset = Some(55);
        p.consistent_cut = Some(ConsistentCut {
            timestamp_ms: 1000,
            mirror_end_offset: 55,
            cut_offset: 40,
            left_offsets: 15,
            left_batches: 3,
            left_bytes: 900,
            first_left_offset: 40,
            first_left_timestamp: 1001,
            last_segment_bytes: None,
        });
        assert_eq!(
            cut_summary(&p),
            "cut at offset 40 of the mirror's 55 (consistent cut at 1000 ms); left behind offsets [40, 55): 3 \
             batch(es), 900 bytes, because the batch at offset 40 has max timestamp 1001 > 1000"
        );
    }
}
