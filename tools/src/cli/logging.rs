//! The process's `tracing` subscriber: `--log-format text` (the default, human lines) or `--log-format json` (one
//! JSON object per line: `timestamp`, `level`, `message`, the event's fields and `target`), on stderr.
//!
//! Why JSON lines: a service's logs go to a collector (journald, Loki, Elasticsearch) that indexes fields; one
//! object per line with the event's fields at the top level needs no parsing rules of its own. The filter is
//! `SEGMIRROR_LOG` (an `EnvFilter` directive such as `info` or `segmirror_transport=debug`) in both formats.

use tracing_subscriber::EnvFilter;

/// The environment variable holding the log filter.
pub const LOG_FILTER_ENV: &str = "SEGMIRROR_LOG";

/// The filter of `--log-format json` when `SEGMIRROR_LOG` is not set (`info`): whoever asks for machine-readable
/// logs collects them, so a service's connects, refusals and stops are logged without a second setting. Text keeps
/// the quiet default (errors only): its commands print their own human lines.
pub const JSON_DEFAULT_FILTER: &str = "info";

/// `--log-format`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Install the subscriber for the whole process (once, before any command runs). Text lines are coloured only when
/// stderr is a terminal: a service's stderr is usually a file or a journal, where escape codes are noise that
/// breaks `grep` and log collectors (`NO_COLOR`, when set, turns colours off on a terminal too).
pub fn init(format: LogFormat) {
    use std::io::IsTerminal as _;
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt().with_writer(std::io::stderr).with_ansi(colour);
    match format {
        LogFormat::Text => builder.with_env_filter(EnvFilter::from_env(LOG_FILTER_ENV)).init(),
        LogFormat::Json => {
            let filter =
                EnvFilter::try_from_env(LOG_FILTER_ENV).unwrap_or_else(|_| EnvFilter::new(JSON_DEFAULT_FILTER));
            builder.with_env_filter(filter).json().flatten_event(true).init()
        }
    }
}
