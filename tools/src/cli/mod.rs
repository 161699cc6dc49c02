//! What the subcommands share: exit codes, the catalog location, store flags, progress bars, report and table
//! printing and the process's one async runtime.
//!
//! Why a module of its own: each command under `cmd/` imports from here and never from another command or from
//! `main.rs`, so a command can be added, moved or removed without touching the others, and a rule every command
//! follows (an exit code, where the catalog lives) is written once.
//!
//! Exit codes (shared by every subcommand): 0 success / sound, 1 corruption found, 2 usage or I/O error.

pub mod catalog;
pub mod config;
pub mod direct_lag;
pub mod link;
pub mod logging;
pub mod metrics;
pub mod progress;
pub mod report;
pub mod store;
pub mod table;
pub mod target_report;

pub use segmirror_service::runtime;

/// Exit status meaning "usage or I/O error".
pub const EXIT_USAGE_OR_IO: u8 = 2;
/// Exit status meaning "corruption found".
pub const EXIT_CORRUPT: u8 = 1;
