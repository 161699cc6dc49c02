//! The service layer between the command line (`tools`, binary `segmirror`) and the libraries: what runs for a
//! long time or in several steps, with its wiring, so it can be used and tested without the binary.
//!
//! - [`failover`]: the failover of a link onto its target cluster, its steps, journal and report.
//! - [`apply`]: the appliers, one per delivery mode: bucket (once or following the store) and direct.
//! - [`ship`]: the shippers, one per delivery mode: direct, bucket (continuous), and once to a bucket (seed).
//! - [`serve`]: `segmirror serve`, the read-only Kafka endpoint over a mirror, fed the mirror's durable ends.
//! - [`serve_bucket`]: `segmirror serve --store`, the same endpoint straight from a bucket (the remote read replica).
//! - [`admin_port`]: the HTTP admin API and `/metrics` of the long-running services, with the figures they keep.
//! - [`link`] and [`link_gate`]: a direct link's endpoint and events, and the link record that gates a running
//!   service (pause, resume, promoted, deleted).
//! - [`link_records`]: a link record's lifecycle as the operator drives it (create, alter, pause, resume, promote,
//!   delete, reset a partition), shared by `segmirror link` and the admin API.
//! - [`bucket_ends`]: per partition of a bucket link, the newest version its store holds (the failover's drain,
//!   a bucket follower's lag).
//! - [`offsets`]: consumer groups' offsets read from `__consumer_offsets` segments, a file or a link's catalog, and
//!   committed on the target clamped to what is installed (`segmirror offsets [commit]`).
//! - [`status`]: what `segmirror status` prints, per catalog: links, partitions, tail lag, truncations, bucket lag.
//! - [`topics`]: the source's topics (metadata log, file or a link's catalog) planned, created or checked on the
//!   target (`segmirror topics`).
//! - [`catalog`]: where a mirror's catalog lives and how it is opened, the rule every service and command shares.
//! - [`runtime`]: the process's one async runtime, built on first use.
//!
//! Why a crate of its own: the command line keeps argument parsing, config files and printing; a service here takes
//! its settings as plain values and a shutdown token (`tokio_util::sync::CancellationToken`), so a test (or another
//! front end) runs it directly.

pub mod admin_port;
pub mod apply;
pub mod bucket_ends;
pub mod catalog;
pub mod failover;
pub mod link;
pub mod link_gate;
pub mod link_records;
pub mod offsets;
pub mod runtime;
pub mod serve;
pub mod serve_bucket;
pub mod ship;
pub mod status;
pub mod topics;

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
mod error_line_tests;
