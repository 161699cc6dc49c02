//! A byte progress bar on a terminal, nothing when stderr is piped.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Bars are shown only for inputs at least this large: below it a run is over
/// before a bar would be useful.
pub const MIN_BYTES_FOR_BAR: u64 = 64 * 1024 * 1024;

/// A progress bar over `total` bytes, hidden when stderr is not a terminal or the
/// input is small.
pub fn byte_bar(total: u64, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() || total < MIN_BYTES_FOR_BAR {
        return ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec} ETA {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_message(what.to_string());
    bar
}
