//! `segmirror offsets`: the consumer groups' committed offsets, read from a broker's `__consumer_offsets`
//! segments on disk (no client, no running broker), as a table, or as the CSV `kafka-consumer-groups.sh
//! --reset-offsets --from-file` reads.
//!
//! Why: the offsets a group committed on the source are what its consumers resume from after a failover; this
//! command shows them from the log dir alone, and exports them for Kafka's own tool. Shipping them over a link and
//! committing them at failover build on the same reader (`segment_format::consumer_offsets`).
//!
//! `--link NAME` (on the applier's host) prints instead what the catalog recorded of the link's shipped offsets and
//! what would be committed on the target now: the source's offset clamped to what is installed of the partition
//! (`segmirror_catalog::LinkOffset`), each clamped row saying so.
//!
//! The reading is `segmirror_service::offsets`; this module parses the flags, prints and chooses the exit status.
//!
//! Exit status: 0; 1 when a `__consumer_offsets` segment is corrupt; 2 on usage or I/O errors.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use segment_format::consumer_offsets::ConsumerOffsets;
use segment_format::Error as FormatError;
use segmirror_catalog::LinkOffset;
use segmirror_service::offsets::{link_offsets, read_log_dirs, Selection};

use crate::cli::runtime::Runtime;
use crate::cli::{EXIT_CORRUPT, EXIT_USAGE_OR_IO};

mod commit;

const OFFSETS_HELP: &str = "\
Offsets are replayed as Kafka's group coordinator loads them: the latest commit per (group, topic, partition); \
tombstones (offset expiry, `kafka-consumer-groups --delete` and --delete-offsets) delete; offsets committed in a \
transaction (sendOffsetsToTransaction) count only once its COMMIT marker is in the log. On a running broker the \
newest commits may not be on disk yet: stop the broker (or read a copy) for exact figures.\n\n\
--csv prints `group,topic,partition,offset` lines, which `kafka-consumer-groups.sh --bootstrap-server B \
--reset-offsets --from-file FILE --all-groups --execute` (or with the --group options of the groups listed) reads.";

#[derive(clap::Args)]
#[command(after_help = OFFSETS_HELP, args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct Args {
    #[command(subcommand)]
    action: Option<Action>,
    /// A broker's log dir (an entry of its `log.dirs`) holding `__consumer_offsets-N` partitions; repeat for
    /// several.
    #[arg(
        long = "log-dir",
        value_name = "DIR",
        required_unless_present = "link",
        conflicts_with = "link"
    )]
    log_dirs: Vec<PathBuf>,
    /// On the applier's host: the offsets shipped over this link, as recorded in the catalog, and what would be
    /// committed on the target now (never beyond the installed data of the partition).
    #[arg(long, value_name = "NAME")]
    link: Option<String>,
    #[command(flatten)]
    link_catalog: crate::cli::catalog::LinkCatalogArgs,
    /// Only groups whose id matches this regular expression (the whole id).
    #[arg(long, value_name = "REGEX")]
    groups: Option<String>,
    /// Only offsets of topics whose name matches this regular expression (the whole name).
    #[arg(long, value_name = "REGEX")]
    topics: Option<String>,
    /// Print CSV lines `group,topic,partition,offset` (no header) for `kafka-consumer-groups --reset-offsets
    /// --from-file`, instead of a table.
    #[arg(long)]
    csv: bool,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Commit the groups' offsets on the target cluster (no leader epoch; each clamped to the partition's installed
    /// log end), at failover.
    Commit(commit::Args),
}

pub fn run(args: Args, runtime: &Runtime) -> anyhow::Result<ExitCode> {
    if let Some(Action::Commit(commit)) = args.action {
        return commit::run(commit, runtime);
    }
    let selection = Selection::new(args.groups.as_deref(), args.topics.as_deref())?;
    if let Some(link) = &args.link {
        return run_link(&args, link, &selection);
    }
    let all = match read_log_dirs(&args.log_dirs, &selection) {
        Ok(all) => all,
        Err(e @ (FormatError::Corrupt { .. } | FormatError::Incomplete { .. })) => {
            eprintln!("segmirror: corrupt __consumer_offsets data: {e}");
            return Ok(ExitCode::from(EXIT_CORRUPT));
        }
        Err(e) => {
            eprintln!("segmirror: error: {e}");
            return Ok(ExitCode::from(EXIT_USAGE_OR_IO));
        }
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.csv {
        write_csv(&mut out, &all)?;
    } else {
        write_table(&mut out, &all)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `--link`: the catalog's offsets of the link, clamped to the installed data.
fn run_link(args: &Args, link: &str, selection: &Selection) -> anyhow::Result<ExitCode> {
    let catalog = args.link_catalog.open()?;
    let (rows, recorded) = link_offsets(&catalog, args.link_catalog.mirror.as_deref(), link, selection)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.csv {
        write_link_csv(&mut out, &rows)?;
    } else {
        write_link_table(&mut out, link, recorded.as_ref(), &rows)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The committable offsets as `kafka-consumer-groups --reset-offsets --from-file` reads them; a partition with
/// nothing installed has no committable offset and no line.
fn write_link_csv(out: &mut impl Write, rows: &[LinkOffset]) -> std::io::Result<()> {
    for o in rows {
        if let Some(offset) = o.committable {
            writeln!(
                out,
                "{},{},{},{offset}",
                csv_field(&o.group),
                csv_field(&o.topic),
                o.partition
            )?;
        }
    }
    Ok(())
}

fn write_link_table(
    out: &mut impl Write,
    link: &str,
    recorded: Option<&segmirror_catalog::RecordedMeta>,
    rows: &[LinkOffset],
) -> std::io::Result<()> {
    let header = [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "SOURCE-OFFSET",
        "INSTALLED-END",
        "COMMITTABLE",
        "NOTE",
    ];
    let cells: Vec<[String; 7]> = rows
        .iter()
        .map(|o| {
            [
                o.group.clone(),
                o.topic.clone(),
                o.partition.to_string(),
                o.source_offset.to_string(),
                o.installed_end_offset.map_or_else(|| "-".into(), |e| e.to_string()),
                o.committable.map_or_else(|| "-".into(), |e| e.to_string()),
                if o.clamped {
                    match o.committable {
                        Some(c) => format!("clamped: {} record(s) not installed yet", o.source_offset - c),
                        None => "clamped: nothing installed yet".into(),
                    }
                } else {
                    String::new()
                },
            ]
        })
        .collect();
    crate::cli::table::print(out, header, &cells)?;
    let clamped = rows.iter().filter(|o| o.clamped).count();
    match recorded {
        Some(r) => writeln!(
            out,
            "{} offset(s) of link {link} (metadata version {}, groups {:?}), {clamped} clamped to the installed data",
            rows.len(),
            r.version,
            r.groups_regex
        ),
        None => writeln!(
            out,
            "no metadata of link {link} recorded yet (is the shipper sending it?)"
        ),
    }
}

/// One CSV field as Jackson's CSV reader (what `kafka-consumer-groups` uses) reads it: quoted when it holds a
/// comma, a quote or a line break, quotes doubled.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn write_csv(out: &mut impl Write, all: &[ConsumerOffsets]) -> std::io::Result<()> {
    for state in all {
        for (key, committed) in &state.offsets {
            writeln!(
                out,
                "{},{},{},{}",
                csv_field(&key.group),
                csv_field(&key.topic),
                key.partition,
                committed.offset
            )?;
        }
    }
    Ok(())
}

fn write_table(out: &mut impl Write, all: &[ConsumerOffsets]) -> std::io::Result<()> {
    let rows: Vec<[String; 6]> = all
        .iter()
        .flat_map(|s| s.offsets.iter())
        .map(|(k, v)| {
            [
                k.group.clone(),
                k.topic.clone(),
                k.partition.to_string(),
                v.offset.to_string(),
                v.leader_epoch.map_or_else(|| "-".to_string(), |e| e.to_string()),
                format!("{}{}", v.commit_timestamp, if v.transactional { " (txn)" } else { "" }),
            ]
        })
        .collect();
    let header = [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "OFFSET",
        "LEADER-EPOCH",
        "COMMITTED-AT-MS",
    ];
    crate::cli::table::print(out, header, &rows)?;
    let partitions: usize = all.iter().map(|s| s.partitions_read.len()).sum();
    let groups: usize = all
        .iter()
        .flat_map(|s| s.offsets.keys().map(|k| &k.group))
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    writeln!(
        out,
        "{} offset(s) of {groups} group(s), from {partitions} __consumer_offsets partition(s)",
        rows.len()
    )?;
    for state in all {
        for (producer_id, key, pending) in state.open_transactions() {
            writeln!(
                out,
                "not counted: offset {} of {} {}-{} committed by producer {producer_id} in a transaction with no \
                 marker yet",
                pending.offset, key.group, key.topic, key.partition
            )?;
        }
        if state.unknown_records > 0 {
            writeln!(
                out,
                "skipped: {} record(s) of a type this version does not know (Kafka skips them too)",
                state.unknown_records
            )?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_as_jackson_reads_them() {
        assert_eq!(csv_field("group-1"), "group-1");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }
}
