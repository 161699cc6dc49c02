//! `segmirror promote`: hand mirror partitions to a stopped Kafka broker (see `segmirror_applier::promote` for what
//! is installed, why leader epochs are restamped, and how a crash is recovered). Argument parsing and output only.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use segmirror_applier::promote::{self, Outcome, PromoteReport, PromoteRequest};
use segmirror_applier::Error;

use crate::cmd::status::{open_mirror_catalog, CATALOG_HELP};
use crate::EXIT_USAGE_OR_IO;

#[derive(clap::Args)]
#[command(after_help = CATALOG_HELP)]
pub struct Args {
    /// The mirror root the applier installs into (`segmirror apply --mirror`).
    #[arg(long, value_name = "DIR")]
    mirror: PathBuf,
    /// The target broker's log dir (one entry of its `log.dirs`). The broker must be stopped, and the topics must
    /// exist there with as many partitions as the mirror (create them on the target cluster first).
    #[arg(long, value_name = "DIR")]
    log_dir: PathBuf,
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
    let (_, mut catalog) = open_mirror_catalog(args.catalog, &args.mirror, true)?;
    let request = PromoteRequest {
        mirror_root: args.mirror,
        log_dir: args.log_dir,
        link: args.link,
        topics,
        force: args.force,
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
        Err(Error::PromoteRefused { refusals }) => {
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

fn print_text(report: &PromoteReport) {
    for note in &report.notes {
        println!("note: {note}");
    }
    for p in &report.partitions {
        let name = format!("{}-{}", p.topic, p.partition);
        let end = p.log_end_offset.map_or_else(|| "?".to_string(), |o| o.to_string());
        match p.outcome {
            Outcome::AlreadyPromoted => println!("{name}: already promoted (offsets up to {end})"),
            Outcome::Promoted | Outcome::Resumed => {
                println!(
                "{name}: {} offsets [{}, {end}) in {} segment(s), {} bytes; {} batch(es) restamped to leader epoch \
                 {}; topic id {}",
                if p.outcome == Outcome::Resumed { "finished promoting" } else { "promoted" },
                p.log_start_offset,
                p.segments,
                p.log_bytes,
                p.batches_restamped,
                p.leader_epoch.map_or_else(|| "?".to_string(), |e| e.to_string()),
                p.target_topic_id.as_deref().unwrap_or("?"),
            )
            }
        }
    }
    println!(
        "{} partition(s) promoted into {} from link {:?}; start the broker",
        report.changed(),
        report.log_dir.display(),
        report.link
    );
}
