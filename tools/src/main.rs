//! `segmirror`: the command line. Argument parsing and output only; the work is
//! done by the library crates. One module per subcommand under `cmd/`; what they
//! share (exit codes, the catalog location, store flags, progress bars, the one
//! async runtime) is in `cli/`. Commands import from `cli/`, never from each other
//! or from this file.
//!
//! Exit codes (shared by every subcommand): 0 success / sound, 1 corruption found,
//! 2 usage or I/O error. A long-running service whose link is promoted or deleted has
//! reached its link's end, not failed: 0 (`cli::report::end_on_closed`).

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;
mod cmd;

use cli::config::Mode;
use cli::logging::LogFormat;
use cli::report::end_on_closed;
use cli::runtime::Runtime;
use cli::EXIT_USAGE_OR_IO;

/// Physical replication of Apache Kafka partitions: ships the broker's own log
/// segments byte for byte, so every record keeps its offset.
#[derive(Parser)]
#[command(name = "segmirror", version, about, long_about = None)]
struct Cli {
    /// How log events are written to stderr: human lines, or one JSON object per line (level, message, fields;
    /// with json the filter defaults to info). The filter: SEGMIRROR_LOG.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check log dirs, partition dirs or single segment files for corruption.
    Verify(cmd::verify::Args),
    /// Write sample Kafka partition directories (every codec, transactions, gaps).
    Generate(cmd::generate::Args),
    /// Run the whole pipeline on embedded defaults in one folder: generate a sample source log dir, seed it into a
    /// local store, apply it into a mirror, verify the mirror, audit the store and compare mirror and source byte
    /// for byte.
    Demo(cmd::demo::Args),
    /// Ship Kafka log dirs to an object store once (seed or catch up a mirror); reruns ship only what is new.
    Seed(cmd::seed::Args),
    /// Install what a shipper put in an object store into a mirror directory, byte for byte; reruns install only
    /// what is new and finish an interrupted run (--follow: keep installing). With --listen ADDR or --connect
    /// HOST:PORT instead of the store flags: run the tail applier, receiving what a `segmirror ship` streams. The
    /// flags of both modes are listed under `segmirror apply --help`.
    Apply(cmd::apply::Args),
    /// Show the catalog: links, mirror partitions, installed segments and offsets, last events.
    Status(cmd::status::Args),
    /// Manage replication links: create, list, describe, alter, pause, resume, promote, delete (the catalog of
    /// this host: the target's mirror catalog, or the source host's data directory catalog that `ship` reads).
    Link(cmd::link::Args),
    /// Install mirror partitions into a stopped Kafka broker's log dir, as that cluster's topics.
    Promote(cmd::promote::Args),
    /// Fail a link over onto its target cluster: cut (drain or now), create/check the topics, stop the brokers,
    /// install the mirror, start the brokers, commit the consumer offsets; journaled, resumable (`--status`).
    Failover(cmd::failover::Args),
    /// Show the consumer groups' committed offsets from a broker's `__consumer_offsets` segments on disk, or
    /// export them as the CSV `kafka-consumer-groups --reset-offsets --from-file` reads.
    Offsets(cmd::offsets::Args),
    /// Create or check the source's topics on the target cluster: same partition counts and topic-level configs,
    /// every difference reported (`topics plan|create|check`).
    Topics(cmd::topics::Args),
    /// Stream new batches of Kafka log dirs to a `segmirror apply --listen|--connect` over one TCP link (mutual
    /// TLS or --plaintext), until SIGTERM/SIGINT. With --store URL instead: upload them to an object store
    /// continuously, for `segmirror apply --follow`. The flags of both modes are listed under `segmirror ship --help`.
    Ship(cmd::ship::Args),
    /// Receive what a `segmirror ship` streams and append it to a mirror root byte for byte, until SIGTERM/SIGINT.
    /// What `segmirror apply --listen|--connect` runs; kept under this name for scripts that use it.
    #[command(name = "tail-apply", hide = true)]
    ApplyDirect(cmd::apply_direct::Args),
    /// Serve a mirror's topics read-only to Kafka clients (consumers, consumer groups, kcat) while replication
    /// runs: a Kafka-protocol listener over the mirror root, at the source's offsets; writes are refused.
    Serve(cmd::serve::Args),
    /// Ship Kafka log dirs to an object store continuously, until SIGTERM/SIGINT. What `segmirror ship --store URL`
    /// runs (its flags are listed under `segmirror ship --help`).
    #[command(name = "store-ship", hide = true)]
    ShipBucket(cmd::ship_bucket::Args),
}

/// Why a command line was not parsed: its config file (one line, exit 2), or clap's own error (printed as clap
/// prints it).
enum ParseError {
    Config(anyhow::Error),
    Clap(clap::Error),
}

/// The command line parsed: a config file's keys added and the mode chosen from clap's first reading
/// (`cli::config::expand`), then read by the command that runs it (`cli::config::Mode`). `apply`'s and `ship`'s
/// help show both of their modes' flags (`cli::config::both_modes`).
fn parse(args: Vec<OsString>) -> Result<Cli, ParseError> {
    let command = cli::config::both_modes(<Cli as clap::CommandFactory>::command());
    let routed = cli::config::expand(&command, args).map_err(ParseError::Config)?;
    let Some(mode) = routed.mode else {
        return command
            .try_get_matches_from(routed.args)
            .and_then(|matches| <Cli as clap::FromArgMatches>::from_arg_matches(&matches))
            .map_err(ParseError::Clap);
    };
    let matches = mode
        .command(command)
        .try_get_matches_from(routed.args)
        .map_err(ParseError::Clap)?;
    let log_format = matches.get_one::<LogFormat>("log_format").copied().unwrap_or_default();
    let Some(sub) = matches.subcommand_matches(mode.typed()) else {
        return Err(ParseError::Clap(clap::Error::new(
            clap::error::ErrorKind::MissingSubcommand,
        )));
    };
    let command = match mode {
        Mode::ApplyDirect => {
            <cmd::apply_direct::Args as clap::FromArgMatches>::from_arg_matches(sub).map(Command::ApplyDirect)
        }
        Mode::ShipBucket => {
            <cmd::ship_bucket::Args as clap::FromArgMatches>::from_arg_matches(sub).map(Command::ShipBucket)
        }
    }
    .map_err(ParseError::Clap)?;
    Ok(Cli { log_format, command })
}

fn main() -> ExitCode {
    let cli = match parse(std::env::args_os().collect()) {
        Ok(cli) => cli,
        Err(ParseError::Config(e)) => {
            eprintln!("segmirror: error: {}", cli::report::error_line(&e));
            return ExitCode::from(EXIT_USAGE_OR_IO);
        }
        Err(ParseError::Clap(e)) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE_OR_IO)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    cli::logging::init(cli.log_format);
    // Built on first use: a command that runs no async work never starts it.
    let runtime = Runtime::new();
    let result = match cli.command {
        Command::Verify(args) => cmd::verify::run(args, &runtime),
        Command::Generate(args) => cmd::generate::run(args),
        Command::Demo(args) => cmd::demo::run(args, &runtime),
        Command::Seed(args) => cmd::seed::run(args, &runtime),
        // The long-running services end with their link (promoted, deleted): exit 0, saying so.
        Command::Apply(args) => end_on_closed("apply", cmd::apply::run(args, &runtime)),
        Command::Status(args) => cmd::status::run(args),
        Command::Link(args) => cmd::link::run(args),
        Command::Promote(args) => cmd::promote::run(args),
        Command::Failover(args) => cmd::failover::run(args, &runtime),
        Command::Offsets(args) => cmd::offsets::run(args, &runtime),
        Command::Topics(args) => cmd::topics::run(args, &runtime),
        Command::Ship(args) => end_on_closed("ship", cmd::ship::run(args, &runtime)),
        Command::Serve(args) => cmd::serve::run(args, &runtime),
        Command::ApplyDirect(args) => end_on_closed("tail-apply", cmd::apply_direct::run(args, &runtime)),
        Command::ShipBucket(args) => end_on_closed("ship", cmd::ship_bucket::run(args, &runtime)),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // Each cause once (see `error_line`): a chain whose messages embed their sources' text is not repeated.
            eprintln!("segmirror: error: {}", cli::report::error_line(&e));
            ExitCode::from(EXIT_USAGE_OR_IO)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example files of docs/config.md, parsed as `main` does: every key is a flag the
    /// command takes, with a value it accepts.
    #[test]
    fn the_documented_example_configs_parse() {
        let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples");
        for (command, file) in [("ship", "ship.toml"), ("apply", "apply.toml")] {
            let path = examples.join(file);
            let args: Vec<OsString> = ["segmirror", command, "--config"]
                .into_iter()
                .map(OsString::from)
                .chain([path.clone().into_os_string()])
                .collect();
            let cli = match parse(args) {
                Ok(cli) => cli,
                Err(ParseError::Config(e)) => panic!("{}: {e:#}", path.display()),
                Err(ParseError::Clap(e)) => panic!("{}: {e}", path.display()),
            };
            assert_eq!(cli.log_format, LogFormat::Json, "{file}: log-format read");
            match (command, cli.command) {
                ("ship", Command::Ship(_)) | ("apply", Command::ApplyDirect(_)) => {}
                (c, _) => panic!("{file}: `{c}` parsed as another command"),
            }
        }
    }

    /// `apply` and `ship` with their other mode's flags added for their help (`cli::config::both_modes`) are a valid
    /// command (clap's own consistency checks: every `requires` and group names an argument that exists), and a
    /// store apply parses as before.
    #[test]
    fn apply_with_both_modes_is_consistent_and_parses_the_store_apply() {
        use clap::{CommandFactory, FromArgMatches};
        let command = cli::config::both_modes(Cli::command());
        command.clone().debug_assert();
        let matches = command
            .try_get_matches_from(["segmirror", "apply", "--store", "/s", "--mirror", "m", "--follow"])
            .unwrap();
        match Cli::from_arg_matches(&matches).unwrap().command {
            Command::Apply(_) => {}
            _ => panic!("not the store apply"),
        }
    }

    /// Every flag of a service is a config key and every key one of its flags (a flag added without its key would
    /// be unreachable from a config file); the flags `apply --listen` refuses are exactly the store apply's own.
    #[test]
    fn every_service_flag_is_a_config_key() {
        use std::collections::BTreeSet;

        use clap::CommandFactory;
        let cli = Cli::command();
        let not_keys = ["config", "help", "version"];
        let longs = |args: Vec<&clap::Arg>| -> BTreeSet<String> {
            args.into_iter()
                .filter_map(|a| a.get_long())
                .filter(|l| !not_keys.contains(l))
                .map(String::from)
                .collect()
        };
        let of = |name: &str| {
            let sub = cli
                .find_subcommand(name)
                .unwrap_or_else(|| panic!("no subcommand {name}"));
            longs(sub.get_arguments().collect())
        };
        let globals = longs(cli.get_arguments().filter(|a| a.is_global_set()).collect());
        for name in ["ship", "tail-apply"] {
            let flags: BTreeSet<String> = of(name).union(&globals).cloned().collect();
            let keys: BTreeSet<String> = cli::config::config_keys(name).into_iter().map(String::from).collect();
            assert_eq!(
                flags, keys,
                "`segmirror {name}`: flags (left) and config keys (right) differ"
            );
        }
        let store_only: BTreeSet<String> = of("apply").difference(&of("tail-apply")).cloned().collect();
        let refused: BTreeSet<String> = cli::config::batch_apply_flags().iter().map(|f| f.to_string()).collect();
        assert_eq!(
            store_only, refused,
            "the store apply's own flags (left) and those apply --listen refuses (right)"
        );
    }
}
