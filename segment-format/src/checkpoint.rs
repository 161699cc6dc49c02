//! The broker's small text files: offset checkpoints, `leader-epoch-checkpoint`
//! and `meta.properties`.
//!
//! The four log-dir root checkpoints and `leader-epoch-checkpoint` share Kafka's
//! `CheckpointFile` format: a version line (`0`), a count line, then one entry per
//! line. Reading follows `CheckpointFile.CheckpointReadBuffer` exactly, because a
//! file the broker cannot read takes the whole log dir offline: an empty file is an
//! empty list, a missing count line is an empty list, every later line must parse
//! (fields split on Java's `\s+`), and the number of entry lines must equal the
//! count. Errors name the line and its byte position.
//!
//! The leader-epoch checks here are what the broker relies on but never verifies
//! for a copied file: epochs and start offsets strictly increase
//! ([`LeaderEpochCheckpoint::check`]), and every magic-2 batch carries the epoch in
//! force at its base offset ([`LeaderEpochChecker`], fed batches in log order).
//!
//! `meta.properties` is a Java properties file read as `MetaProperties.Builder`
//! does (version 0 or 1; v1 requires `cluster.id` and `node.id`).
//!
//! All writers go through [`crate::durable::write_atomically`].

use std::path::Path;

use crate::error::{Defect, ParseError, Result};
use crate::java_text::java_lines;

mod leader_epoch;
mod meta_properties;
mod offsets;

pub use leader_epoch::{leader_epoch_checkpoint_path, EpochEntry, LeaderEpochChecker, LeaderEpochCheckpoint};
pub use meta_properties::{MetaProperties, MetaPropertiesVersion};
pub use offsets::{OffsetCheckpoint, OffsetCheckpointEntry};

/// The only version of every `CheckpointFile` Kafka writes.
pub const CHECKPOINT_VERSION: i32 = 0;

fn checkpoint_error(position: u64, message: String) -> ParseError {
    ParseError::Corrupt {
        position,
        offset: None,
        defect: Defect::Checkpoint { message },
    }
}

/// One entry type of a `CheckpointFile`.
trait CheckpointEntry: Sized {
    fn from_line(line: &str) -> Option<Self>;
    fn to_line(&self) -> String;
}

/// Parse a checkpoint file's bytes into entries with the byte position of their line.
fn parse_checkpoint<T: CheckpointEntry>(bytes: &[u8]) -> Result<Vec<(u64, T)>, ParseError> {
    let text = std::str::from_utf8(bytes)
        .map_err(|e| checkpoint_error(e.valid_up_to() as u64, "file is not valid UTF-8".into()))?;
    let lines = java_lines(text);
    let mut lines = lines.into_iter().enumerate().map(|(i, (pos, l))| (i + 1, pos, l));
    let Some((_, pos, version_line)) = lines.next() else {
        return Ok(Vec::new());
    };
    let version: i32 = version_line
        .parse()
        .map_err(|_| checkpoint_error(pos, format!("line 1: malformed version line '{version_line}'")))?;
    if version != CHECKPOINT_VERSION {
        return Err(checkpoint_error(
            pos,
            format!("line 1: unrecognised version {version}, expected {CHECKPOINT_VERSION}"),
        ));
    }
    let Some((_, count_pos, count_line)) = lines.next() else {
        return Ok(Vec::new());
    };
    let count: i32 = count_line
        .parse()
        .map_err(|_| checkpoint_error(count_pos, format!("line 2: malformed entry count '{count_line}'")))?;
    if count < 0 {
        return Err(checkpoint_error(
            count_pos,
            format!("line 2: negative entry count {count}"),
        ));
    }
    let mut entries = Vec::new();
    for (n, pos, line) in lines {
        let entry =
            T::from_line(line).ok_or_else(|| checkpoint_error(pos, format!("line {n}: malformed line '{line}'")))?;
        entries.push((pos, entry));
    }
    if entries.len() != count as usize {
        return Err(checkpoint_error(
            count_pos,
            format!("line 2: expected {count} entries, found {}", entries.len()),
        ));
    }
    Ok(entries)
}

/// The text Kafka writes: version, count, one entry per line, `\n` after each.
fn encode_checkpoint<T: CheckpointEntry>(entries: &[T]) -> String {
    let mut out = format!("{CHECKPOINT_VERSION}\n{}\n", entries.len());
    for e in entries {
        out.push_str(&e.to_line());
        out.push('\n');
    }
    out
}

/// A regular file of at most [`MAX_TEXT_FILE_BYTES`](crate::open::MAX_TEXT_FILE_BYTES).
fn read_file(path: &Path) -> Result<Vec<u8>> {
    crate::open::read_capped(path, "checkpoint file", crate::open::MAX_TEXT_FILE_BYTES)
}

#[cfg(test)]
mod tests;
