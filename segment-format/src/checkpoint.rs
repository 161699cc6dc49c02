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

use std::path::{Path, PathBuf};

use crate::batch::BatchInfo;
use crate::durable::write_atomically;
use crate::error::{Defect, ParseError, Result};
use crate::partition_metadata::Uuid;
use crate::report::Finding;

/// The only version of every `CheckpointFile` Kafka writes.
pub const CHECKPOINT_VERSION: i32 = 0;

/// Java's `\s`: `[ \t\n\x0B\f\r]` (ASCII only, unlike [`char::is_whitespace`]).
pub(crate) fn is_java_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\u{0B}' | '\u{0C}' | '\r')
}

/// `Pattern.split(input)` with limit 0 for a pattern of the form `<lead>\s+`:
/// `lead` is `None` for `\s+` and `Some(':')` for `:\s+`. Like Java, a match at the
/// start yields a leading empty string, trailing empty strings are dropped, and an
/// input without any match is returned whole.
pub(crate) fn java_split(input: &str, lead: Option<char>) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut matched = false;
    let mut chars = input.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let sep_start = i;
        let after_lead = match lead {
            Some(l) if c == l => matches!(chars.peek(), Some(&(_, n)) if is_java_whitespace(n)),
            Some(_) => false,
            None => is_java_whitespace(c),
        };
        if !after_lead {
            continue;
        }
        // Consume the whitespace run (the lead, if any, is already consumed).
        let mut end = i + c.len_utf8();
        while let Some(&(j, n)) = chars.peek() {
            if !is_java_whitespace(n) {
                break;
            }
            end = j + n.len_utf8();
            chars.next();
        }
        parts.push(&input[start..sep_start]);
        start = end;
        matched = true;
    }
    if !matched {
        return vec![input];
    }
    parts.push(&input[start..]);
    while parts.last().is_some_and(|p| p.is_empty()) {
        parts.pop();
    }
    parts
}

/// Lines as `BufferedReader.readLine` returns them (terminated by `\n`, `\r` or
/// `\r\n`; a last line without terminator counts), with their byte positions.
fn java_lines(text: &str) -> Vec<(u64, &str)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes.get(i) {
            Some(b'\n') => {
                out.push((start as u64, &text[start..i]));
                i += 1;
                start = i;
            }
            Some(b'\r') => {
                out.push((start as u64, &text[start..i]));
                i += if bytes.get(i + 1) == Some(&b'\n') { 2 } else { 1 };
                start = i;
            }
            _ => i += 1,
        }
    }
    if start < bytes.len() {
        out.push((start as u64, &text[start..]));
    }
    out
}

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

/// One line of a root offset checkpoint: `<topic> <partition> <offset>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OffsetCheckpointEntry {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

impl CheckpointEntry for OffsetCheckpointEntry {
    fn from_line(line: &str) -> Option<Self> {
        match java_split(line, None).as_slice() {
            [topic, partition, offset] => Some(OffsetCheckpointEntry {
                topic: (*topic).to_string(),
                partition: partition.parse().ok()?,
                offset: offset.parse().ok()?,
            }),
            _ => None,
        }
    }

    fn to_line(&self) -> String {
        format!("{} {} {}", self.topic, self.partition, self.offset)
    }
}

/// A root offset checkpoint (`recovery-point-offset-checkpoint`,
/// `log-start-offset-checkpoint`, `replication-offset-checkpoint`,
/// `cleaner-offset-checkpoint`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetCheckpoint {
    pub entries: Vec<OffsetCheckpointEntry>,
}

impl OffsetCheckpoint {
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        Ok(OffsetCheckpoint {
            entries: parse_checkpoint(bytes)?.into_iter().map(|(_, e)| e).collect(),
        })
    }

    pub fn encode(&self) -> String {
        encode_checkpoint(&self.entries)
    }

    pub fn read(path: &Path) -> Result<Self> {
        Self::parse(&read_file(path)?).map_err(|e| e.at(path))
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        write_atomically(path, self.encode().as_bytes())
    }

    /// The offset recorded for a partition (the last one if listed twice, as the
    /// broker's map keeps the last).
    pub fn get(&self, topic: &str, partition: i32) -> Option<i64> {
        self.entries
            .iter()
            .rev()
            .find(|e| e.topic == topic && e.partition == partition)
            .map(|e| e.offset)
    }
}

/// One line of `leader-epoch-checkpoint`: the first offset written in `epoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

impl CheckpointEntry for EpochEntry {
    fn from_line(line: &str) -> Option<Self> {
        match java_split(line, None).as_slice() {
            [epoch, start] => Some(EpochEntry {
                epoch: epoch.parse().ok()?,
                start_offset: start.parse().ok()?,
            }),
            _ => None,
        }
    }

    fn to_line(&self) -> String {
        format!("{} {}", self.epoch, self.start_offset)
    }
}

/// The contents of a partition's `leader-epoch-checkpoint`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochCheckpoint {
    pub entries: Vec<EpochEntry>,
    /// Byte position of each entry's line when parsed; empty when built in memory.
    line_positions: Vec<u64>,
}

impl LeaderEpochCheckpoint {
    pub fn new(entries: Vec<EpochEntry>) -> Self {
        LeaderEpochCheckpoint {
            entries,
            line_positions: Vec::new(),
        }
    }

    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let (line_positions, entries) = parse_checkpoint::<EpochEntry>(bytes)?.into_iter().unzip();
        Ok(LeaderEpochCheckpoint {
            entries,
            line_positions,
        })
    }

    pub fn encode(&self) -> String {
        encode_checkpoint(&self.entries)
    }

    pub fn read(path: &Path) -> Result<Self> {
        Self::parse(&read_file(path)?).map_err(|e| e.at(path))
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        write_atomically(path, self.encode().as_bytes())
    }

    /// The epoch in force at `offset`: the entry with the largest start offset <= `offset`.
    pub fn epoch_at(&self, offset: i64) -> Option<i32> {
        self.entries
            .iter()
            .take_while(|e| e.start_offset <= offset)
            .last()
            .map(|e| e.epoch)
    }

    fn position_of(&self, index: usize) -> Option<u64> {
        self.line_positions.get(index).copied()
    }

    /// The invariants `LeaderEpochFileCache.assign` maintains: no negative values,
    /// epochs strictly increasing, start offsets strictly increasing.
    pub fn check(&self, path: &Path) -> Vec<Finding> {
        let mut findings = Vec::new();
        let mut report = |i: usize, offset: i64, message: String| {
            findings.push(Finding::error(
                path,
                self.position_of(i),
                Some(offset),
                Defect::Epoch {
                    message: format!("entry {}: {message}", i + 1),
                },
            ));
        };
        let mut prev: Option<EpochEntry> = None;
        for (i, e) in self.entries.iter().enumerate() {
            if e.epoch < 0 || e.start_offset < 0 {
                report(
                    i,
                    e.start_offset,
                    format!("negative epoch or start offset ({} {})", e.epoch, e.start_offset),
                );
            }
            if let Some(p) = prev {
                if e.epoch <= p.epoch {
                    report(
                        i,
                        e.start_offset,
                        format!("epoch {} does not increase (previous {})", e.epoch, p.epoch),
                    );
                }
                if e.start_offset <= p.start_offset {
                    report(
                        i,
                        e.start_offset,
                        format!(
                            "start offset {} does not increase (epoch {} starts at {})",
                            e.start_offset, p.epoch, p.start_offset
                        ),
                    );
                }
            }
            prev = Some(*e);
        }
        findings
    }
}

/// Streaming check of batches' `partitionLeaderEpoch` against the checkpoint.
///
/// Feed every batch of the partition in offset order (all segments). Only magic-2
/// batches with an epoch >= 0 take part, as in `LogSegment.recover`. A run of
/// batches with the same disagreement is reported once, at its first batch, so a
/// wrong checkpoint does not produce one finding per batch.
#[derive(Debug)]
pub struct LeaderEpochChecker {
    entries: Vec<EpochEntry>,
    /// Index of the entry in force for the last batch.
    current: usize,
    previous: Option<(i32, i64)>,
    last_reported: Option<(i32, Option<i32>)>,
    findings: Vec<Finding>,
}

impl LeaderEpochChecker {
    pub fn new(checkpoint: &LeaderEpochCheckpoint) -> Self {
        LeaderEpochChecker {
            entries: checkpoint.entries.clone(),
            current: 0,
            previous: None,
            last_reported: None,
            findings: Vec::new(),
        }
    }

    /// `log_path` is the `.log` file `batch` was read from.
    pub fn on_batch(&mut self, log_path: &Path, batch: &BatchInfo) {
        let epoch = batch.partition_leader_epoch;
        if batch.magic < 2 || epoch < 0 {
            return;
        }
        let error = |message: String| {
            Finding::error(
                log_path,
                Some(batch.position),
                Some(batch.base_offset),
                Defect::Epoch { message },
            )
        };
        if let Some((prev_epoch, prev_offset)) = self.previous {
            if epoch < prev_epoch {
                self.findings.push(error(format!(
                    "batch epoch {epoch} is lower than epoch {prev_epoch} of the batch at offset {prev_offset}"
                )));
            }
        }
        self.previous = Some((epoch, batch.base_offset));
        while self
            .entries
            .get(self.current + 1)
            .is_some_and(|next| next.start_offset <= batch.base_offset)
        {
            self.current += 1;
        }
        let (ok, expected, message) = match self.entries.get(self.current) {
            None => (
                false,
                None,
                format!("batch epoch {epoch} but leader-epoch-checkpoint has no entries"),
            ),
            Some(first) if batch.base_offset < first.start_offset => (
                epoch <= first.epoch,
                Some(first.epoch),
                format!(
                    "batch epoch {epoch} before the first checkpoint entry (epoch {} from offset {}) is higher than it",
                    first.epoch, first.start_offset
                ),
            ),
            Some(e) => (
                epoch == e.epoch,
                Some(e.epoch),
                format!(
                    "batch epoch {epoch} but leader-epoch-checkpoint has epoch {} in force from offset {}",
                    e.epoch, e.start_offset
                ),
            ),
        };
        if ok {
            self.last_reported = None;
        } else if self.last_reported != Some((epoch, expected)) {
            self.last_reported = Some((epoch, expected));
            self.findings.push(error(message));
        }
    }

    pub fn finish(self) -> Vec<Finding> {
        self.findings
    }
}

/// `meta.properties` version (`MetaPropertiesVersion`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaPropertiesVersion {
    /// ZooKeeper era: `broker.id`, everything optional.
    V0,
    /// KRaft: `cluster.id` and `node.id` required.
    V1,
}

impl MetaPropertiesVersion {
    pub fn number(self) -> i32 {
        match self {
            MetaPropertiesVersion::V0 => 0,
            MetaPropertiesVersion::V1 => 1,
        }
    }
}

/// The identity of a log directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    pub version: MetaPropertiesVersion,
    pub cluster_id: Option<String>,
    /// `node.id` (v1) or `broker.id` (v0).
    pub node_id: Option<i32>,
    pub directory_id: Option<Uuid>,
}

fn meta_error(message: String) -> ParseError {
    checkpoint_error(0, format!("meta.properties: {message}"))
}

/// Java's `String.trim`: strips every char <= ' ' at both ends.
fn java_trim(s: &str) -> &str {
    s.trim_matches(|c: char| c <= ' ')
}

impl MetaProperties {
    /// Parse as `PropertiesUtils.readPropertiesFile` + `MetaProperties.Builder` do.
    pub fn parse(bytes: &[u8]) -> Result<Self, ParseError> {
        let props = parse_java_properties(bytes);
        let get = |key: &str| props.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        let version_str = get("version").unwrap_or("0");
        let version = match java_trim(version_str).parse::<i32>() {
            Ok(0) => MetaPropertiesVersion::V0,
            Ok(1) => MetaPropertiesVersion::V1,
            Ok(n) => return Err(meta_error(format!("unknown version number {n}"))),
            Err(_) => return Err(meta_error(format!("invalid version string '{version_str}'"))),
        };
        let int_prop = |key: &str| -> Result<Option<i32>, ParseError> {
            match get(key) {
                None => Ok(None),
                Some(v) => v
                    .parse::<i32>()
                    .map(Some)
                    .map_err(|_| meta_error(format!("unable to read {key} '{v}' as a base-10 number"))),
            }
        };
        let node_id = match version {
            MetaPropertiesVersion::V0 => int_prop("broker.id")?,
            MetaPropertiesVersion::V1 => {
                Some(int_prop("node.id")?.ok_or_else(|| meta_error("node.id was not found".into()))?)
            }
        };
        let cluster_id = get("cluster.id").map(str::to_string);
        if version == MetaPropertiesVersion::V1 && cluster_id.is_none() {
            return Err(meta_error("cluster.id was not found".into()));
        }
        let directory_id = match get("directory.id") {
            None => None,
            Some(v) => Some(
                v.parse::<Uuid>()
                    .map_err(|e| meta_error(format!("unable to read directory.id as a Uuid: {e}")))?,
            ),
        };
        Ok(MetaProperties {
            version,
            cluster_id,
            node_id,
            directory_id,
        })
    }

    /// Properties text in a fixed key order (`MetaProperties.toProperties`; Java's
    /// `Properties.store` order is unspecified and its date comment is omitted).
    pub fn encode(&self) -> String {
        let mut out = String::from("#\n");
        let mut put = |k: &str, v: &str| {
            out.push_str(&escape_property(k, true));
            out.push('=');
            out.push_str(&escape_property(v, false));
            out.push('\n');
        };
        put("version", &self.version.number().to_string());
        if let Some(c) = &self.cluster_id {
            put("cluster.id", c);
        }
        if let Some(n) = self.node_id {
            let key = match self.version {
                MetaPropertiesVersion::V0 => "broker.id",
                MetaPropertiesVersion::V1 => "node.id",
            };
            put(key, &n.to_string());
        }
        if let Some(d) = &self.directory_id {
            put("directory.id", &d.to_string());
        }
        out
    }

    pub fn read(path: &Path) -> Result<Self> {
        Self::parse(&read_file(path)?).map_err(|e| e.at(path))
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        write_atomically(path, self.encode().as_bytes())
    }
}

/// `Properties.saveConvert` with Unicode escaping (as `store(OutputStream)` does):
/// escapes `\`, `=`, `:`, `#`, `!`, control whitespace, spaces in keys, a leading
/// space in values, and every char outside `0x20..=0x7e` as `\uXXXX` (UTF-16
/// units). The output is ASCII, so Kafka's ISO-8859-1 reader gets it back intact
/// (Kafka's own `store(Writer)` writes such chars raw in UTF-8 and misreads them).
fn escape_property(s: &str, is_key: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for (i, c) in s.chars().enumerate() {
        match c {
            ' ' if i == 0 || is_key => out.push_str("\\ "),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{0C}' => out.push_str("\\f"),
            '=' | ':' | '#' | '!' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04X}"));
                }
            }
        }
    }
    out
}

/// `Properties.load(InputStream)`: ISO-8859-1 text, `#`/`!` comments, `\`
/// continuation lines, key ended by the first unescaped `=`, `:` or whitespace,
/// `\t \n \r \f \uXXXX` escapes. Returns pairs in file order (later keys win).
pub(crate) fn parse_java_properties(bytes: &[u8]) -> Vec<(String, String)> {
    let text: String = bytes.iter().map(|&b| char::from(b)).collect();
    let is_ws = |c: char| matches!(c, ' ' | '\t' | '\u{0C}');
    // Join logical lines.
    let mut logical: Vec<String> = Vec::new();
    let mut pending: Option<String> = None;
    for raw in java_lines(&text).into_iter().map(|(_, l)| l) {
        let line = raw.trim_start_matches(is_ws);
        if pending.is_none() && (line.is_empty() || line.starts_with('#') || line.starts_with('!')) {
            continue;
        }
        let trailing_backslashes = line.chars().rev().take_while(|&c| c == '\\').count();
        let continues = trailing_backslashes % 2 == 1;
        let body = if continues { &line[..line.len() - 1] } else { line };
        let mut acc = pending.take().unwrap_or_default();
        acc.push_str(body);
        if continues {
            pending = Some(acc);
        } else {
            logical.push(acc);
        }
    }
    if let Some(acc) = pending {
        logical.push(acc);
    }
    logical
        .iter()
        .map(|line| {
            let chars: Vec<char> = line.chars().collect();
            let mut key_end = chars.len();
            let mut value_start = chars.len();
            let mut i = 0;
            while i < chars.len() {
                let c = chars.get(i).copied().unwrap_or(' ');
                if c == '\\' {
                    i += 2;
                    continue;
                }
                if c == '=' || c == ':' || is_ws(c) {
                    key_end = i;
                    let mut j = i;
                    while chars.get(j).is_some_and(|&c| is_ws(c)) {
                        j += 1;
                    }
                    if !is_ws(c) {
                        j = i + 1;
                    } else if chars.get(j).is_some_and(|&c| c == '=' || c == ':') {
                        j += 1;
                    }
                    while chars.get(j).is_some_and(|&c| is_ws(c)) {
                        j += 1;
                    }
                    value_start = j;
                    break;
                }
                i += 1;
            }
            let key: String = chars.get(..key_end).unwrap_or_default().iter().collect();
            let value: String = chars.get(value_start..).unwrap_or_default().iter().collect();
            (unescape_property(&key), unescape_property(&value))
        })
        .collect()
}

/// Undo `Properties` escapes. Java strings are UTF-16, so `\uD83D\uDE00` pairs are
/// combined; a lone surrogate or bad hex becomes U+FFFD (Java would throw or keep it).
fn unescape_property(s: &str) -> String {
    let mut units: Vec<u16> = Vec::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        let c = if c == '\\' {
            match chars.next() {
                Some('t') => '\t',
                Some('n') => '\n',
                Some('r') => '\r',
                Some('f') => '\u{0C}',
                Some('u') => {
                    let hex: String = chars.by_ref().take(4).collect();
                    let well_formed = hex.len() == 4 && hex.chars().all(|h| h.is_ascii_hexdigit());
                    match u16::from_str_radix(&hex, 16) {
                        Ok(unit) if well_formed => {
                            units.push(unit);
                            continue;
                        }
                        _ => char::REPLACEMENT_CHARACTER,
                    }
                }
                Some(other) => other,
                None => continue,
            }
        } else {
            c
        };
        let mut buf = [0u16; 2];
        units.extend_from_slice(c.encode_utf16(&mut buf));
    }
    String::from_utf16_lossy(&units)
}

/// Where the checkpoint of a partition directory lives.
pub fn leader_epoch_checkpoint_path(partition_dir: &Path) -> PathBuf {
    partition_dir.join(crate::dir::LEADER_EPOCH_CHECKPOINT_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::ControlType;
    use crate::report::Severity;
    use proptest::prelude::*;

    #[test]
    fn java_split_matches_pattern_split() {
        assert_eq!(java_split("a b  c", None), vec!["a", "b", "c"]);
        assert_eq!(
            java_split(" a b", None),
            vec!["", "a", "b"],
            "leading match keeps an empty string"
        );
        assert_eq!(java_split("a b \t", None), vec!["a", "b"], "trailing empties dropped");
        assert_eq!(java_split("", None), vec![""]);
        assert!(java_split("   ", None).is_empty());
        assert_eq!(java_split("version: 0", Some(':')), vec!["version", "0"]);
        assert_eq!(java_split("version:0", Some(':')), vec!["version:0"]);
        assert_eq!(java_split("a: b: c", Some(':')), vec!["a", "b", "c"]);
        assert_eq!(java_split("a:: b", Some(':')), vec!["a:", "b"]);
    }

    #[test]
    fn leader_epoch_checkpoint_exact_bytes_and_round_trip() {
        let cp = LeaderEpochCheckpoint::new(vec![
            EpochEntry {
                epoch: 0,
                start_offset: 0,
            },
            EpochEntry {
                epoch: 3,
                start_offset: 1500,
            },
        ]);
        assert_eq!(cp.encode(), "0\n2\n0 0\n3 1500\n");
        let parsed = LeaderEpochCheckpoint::parse(cp.encode().as_bytes()).expect("parse");
        assert_eq!(parsed.entries, cp.entries);
        assert_eq!(parsed.epoch_at(1499), Some(0));
        assert_eq!(parsed.epoch_at(1500), Some(3));
        assert_eq!(parsed.epoch_at(-1), None);
    }

    #[test]
    fn offset_checkpoint_exact_bytes_and_round_trip() {
        let cp = OffsetCheckpoint {
            entries: vec![
                OffsetCheckpointEntry {
                    topic: "orders".into(),
                    partition: 0,
                    offset: 42,
                },
                OffsetCheckpointEntry {
                    topic: "a.b-c".into(),
                    partition: 12,
                    offset: 0,
                },
            ],
        };
        assert_eq!(cp.encode(), "0\n2\norders 0 42\na.b-c 12 0\n");
        assert_eq!(OffsetCheckpoint::parse(cp.encode().as_bytes()), Ok(cp.clone()));
        assert_eq!(cp.get("a.b-c", 12), Some(0));
        assert_eq!(cp.get("a.b-c", 11), None);
    }

    #[test]
    fn reader_follows_checkpoint_file_rules() {
        let empty = OffsetCheckpoint::parse(b"").expect("empty file");
        assert!(empty.entries.is_empty());
        assert!(OffsetCheckpoint::parse(b"0\n")
            .expect("no count line")
            .entries
            .is_empty());
        // CRLF and a missing final newline are fine; tabs and repeated spaces split.
        let cp = OffsetCheckpoint::parse(b"0\r\n1\r\nt\t3  7").expect("crlf");
        assert_eq!(cp.get("t", 3), Some(7));
        // Trailing whitespace is dropped by split; leading whitespace is not.
        assert!(OffsetCheckpoint::parse(b"0\n1\nt 3 7 \n").is_ok());
        let err = OffsetCheckpoint::parse(b"0\n1\n t 3 7\n").expect_err("leading space");
        assert_corrupt_at(err, 4, "line 3");
    }

    fn assert_corrupt_at(err: ParseError, position: u64, needle: &str) {
        match err {
            ParseError::Corrupt {
                position: p,
                defect: Defect::Checkpoint { message },
                ..
            } => {
                assert_eq!(p, position, "{message}");
                assert!(message.contains(needle), "{message} should mention {needle}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn reader_rejects_malformed_files_with_line_positions() {
        assert_corrupt_at(OffsetCheckpoint::parse(b"1\n0\n").expect_err("version"), 0, "version");
        assert_corrupt_at(
            OffsetCheckpoint::parse(b" 0\n0\n").expect_err("version ws"),
            0,
            "line 1",
        );
        assert_corrupt_at(OffsetCheckpoint::parse(b"0\nx\n").expect_err("count"), 2, "line 2");
        assert_corrupt_at(
            OffsetCheckpoint::parse(b"0\n-1\n").expect_err("negative"),
            2,
            "negative",
        );
        assert_corrupt_at(
            OffsetCheckpoint::parse(b"0\n2\nt 0 1\n").expect_err("short"),
            2,
            "expected 2",
        );
        assert_corrupt_at(
            OffsetCheckpoint::parse(b"0\n1\nt 0 1\nu 0 2\n").expect_err("long"),
            2,
            "found 2",
        );
        assert_corrupt_at(
            OffsetCheckpoint::parse(b"0\n2\nt 0 1\nt x 1\n").expect_err("partition"),
            10,
            "line 4",
        );
        assert_corrupt_at(
            LeaderEpochCheckpoint::parse(b"0\n1\n5 100 7\n").expect_err("3 fields"),
            4,
            "line 3",
        );
        assert_corrupt_at(
            LeaderEpochCheckpoint::parse(b"0\n2\n5 100\n\n").expect_err("empty line"),
            10,
            "line 4",
        );
        assert_corrupt_at(
            LeaderEpochCheckpoint::parse(b"0\n1\n\xff\n").expect_err("utf8"),
            4,
            "UTF-8",
        );
    }

    #[test]
    fn read_and_write_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = leader_epoch_checkpoint_path(dir.path());
        let cp = LeaderEpochCheckpoint::new(vec![EpochEntry {
            epoch: 7,
            start_offset: 99,
        }]);
        cp.write(&path).expect("write");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "0\n1\n7 99\n");
        assert_eq!(LeaderEpochCheckpoint::read(&path).expect("read").entries, cp.entries);
        std::fs::write(&path, b"0\n1\nseven 99\n").expect("corrupt");
        let err = LeaderEpochCheckpoint::read(&path).expect_err("malformed");
        assert!(err.is_corrupt());
        assert_eq!(err.path(), path);
    }

    #[test]
    fn epoch_checkpoint_check_reports_each_violation_at_its_line() {
        let cp = LeaderEpochCheckpoint::parse(b"0\n4\n1 0\n3 50\n3 60\n2 40\n").expect("parse");
        let path = Path::new("leader-epoch-checkpoint");
        let findings = cp.check(path);
        let got: Vec<_> = findings.iter().map(|f| (f.position, f.offset)).collect();
        // entry 3 (line at byte 13): epoch 3 repeats; entry 4 (byte 18): epoch and offset decrease.
        assert_eq!(
            got,
            vec![(Some(13), Some(60)), (Some(18), Some(40)), (Some(18), Some(40))]
        );
        assert!(findings.iter().all(|f| matches!(f.defect, Defect::Epoch { .. })));
        let good = LeaderEpochCheckpoint::parse(b"0\n2\n0 0\n2 10\n").expect("parse");
        assert!(good.check(path).is_empty());
    }

    fn batch(position: u64, base: i64, last: i64, epoch: i32) -> BatchInfo {
        BatchInfo {
            position,
            size: 100,
            magic: 2,
            base_offset: base,
            last_offset: last,
            max_timestamp: 0,
            partition_leader_epoch: epoch,
            producer_id: -1,
            producer_epoch: -1,
            is_transactional: false,
            control: None::<ControlType>,
            is_control: false,
            records_count: (last - base + 1) as i32,
        }
    }

    #[test]
    fn epoch_checker_accepts_consistent_log() {
        let cp = LeaderEpochCheckpoint::new(vec![
            EpochEntry {
                epoch: 0,
                start_offset: 0,
            },
            EpochEntry {
                epoch: 2,
                start_offset: 20,
            },
        ]);
        let mut c = LeaderEpochChecker::new(&cp);
        let log = Path::new("00000000000000000000.log");
        for b in [
            batch(0, 0, 9, 0),
            batch(100, 10, 19, 0),
            batch(200, 20, 29, 2),
            batch(300, 30, 30, 2),
        ] {
            c.on_batch(log, &b);
        }
        // Legacy and unstamped batches are ignored.
        let mut legacy = batch(400, 31, 31, 9);
        legacy.magic = 1;
        c.on_batch(log, &legacy);
        c.on_batch(log, &batch(500, 32, 32, -1));
        assert_eq!(c.finish(), vec![]);
    }

    #[test]
    fn epoch_checker_reports_mismatch_once_per_run_and_decreases() {
        let cp = LeaderEpochCheckpoint::new(vec![
            EpochEntry {
                epoch: 1,
                start_offset: 0,
            },
            EpochEntry {
                epoch: 2,
                start_offset: 20,
            },
        ]);
        let mut c = LeaderEpochChecker::new(&cp);
        let log = Path::new("x.log");
        c.on_batch(log, &batch(0, 0, 9, 1));
        c.on_batch(log, &batch(100, 10, 19, 2)); // epoch 2 before its start offset
        c.on_batch(log, &batch(200, 20, 29, 3)); // epoch 3 missing from checkpoint
        c.on_batch(log, &batch(300, 30, 39, 3)); // same run: not reported again
        c.on_batch(log, &batch(400, 40, 49, 2)); // decrease (and now consistent)
        let f = c.finish();
        let got: Vec<_> = f.iter().map(|f| (f.position, f.offset, f.severity)).collect();
        assert_eq!(
            got,
            vec![
                (Some(100), Some(10), Severity::Error),
                (Some(200), Some(20), Severity::Error),
                (Some(400), Some(40), Severity::Error),
            ]
        );
        assert!(matches!(&f[2].defect, Defect::Epoch { message } if message.contains("lower")));
    }

    #[test]
    fn epoch_checker_before_first_entry_and_empty_checkpoint() {
        let cp = LeaderEpochCheckpoint::new(vec![EpochEntry {
            epoch: 5,
            start_offset: 100,
        }]);
        let mut c = LeaderEpochChecker::new(&cp);
        c.on_batch(Path::new("l"), &batch(0, 50, 59, 4)); // before log start offset: lower epoch fine
        c.on_batch(Path::new("l"), &batch(100, 100, 109, 5));
        assert!(c.finish().is_empty());
        let mut c = LeaderEpochChecker::new(&LeaderEpochCheckpoint::default());
        c.on_batch(Path::new("l"), &batch(0, 0, 0, 0));
        assert_eq!(c.finish().len(), 1);
    }

    #[test]
    fn meta_properties_v1_round_trip_and_kafka_layout() {
        let text = b"#\n#Tue Oct 01 12:00:00 UTC 2024\nnode.id=3\ndirectory.id=J8aAPcfLQt2bqs1JT_rMgQ\nversion=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\n";
        let m = MetaProperties::parse(text).expect("parse");
        assert_eq!(m.version, MetaPropertiesVersion::V1);
        assert_eq!(m.node_id, Some(3));
        assert_eq!(m.cluster_id.as_deref(), Some("MkU3OEVBNTcwNTJENDM2Qk"));
        assert_eq!(
            m.directory_id.map(|d| d.to_string()).as_deref(),
            Some("J8aAPcfLQt2bqs1JT_rMgQ")
        );
        assert_eq!(
            m.encode(),
            "#\nversion=1\ncluster.id=MkU3OEVBNTcwNTJENDM2Qk\nnode.id=3\ndirectory.id=J8aAPcfLQt2bqs1JT_rMgQ\n"
        );
        assert_eq!(MetaProperties::parse(m.encode().as_bytes()), Ok(m));
    }

    #[test]
    fn meta_properties_rules() {
        let v0 = MetaProperties::parse(b"broker.id=7\n").expect("v0 implicit");
        assert_eq!(
            (v0.version, v0.node_id, v0.cluster_id),
            (MetaPropertiesVersion::V0, Some(7), None)
        );
        assert!(
            MetaProperties::parse(b"version=1\nnode.id=1\n").is_err(),
            "v1 needs cluster.id"
        );
        assert!(
            MetaProperties::parse(b"version=1\ncluster.id=x\n").is_err(),
            "v1 needs node.id"
        );
        assert!(MetaProperties::parse(b"version=2\n").is_err());
        assert!(MetaProperties::parse(b"version=1\ncluster.id=x\nnode.id=one\n").is_err());
        assert!(MetaProperties::parse(b"version=1\ncluster.id=x\nnode.id=1\ndirectory.id=@@\n").is_err());
        // Java properties syntax: ':' and spaces separate, continuation lines, escapes.
        let m =
            MetaProperties::parse(b"! comment\n  version : 1\ncluster.id   abc\\\n  def\nnode.id=4\n").expect("syntax");
        assert_eq!(m.cluster_id.as_deref(), Some("abcdef"));
        assert_eq!(
            parse_java_properties(b"k\\=ey=v\\u0041\\tx"),
            vec![("k=ey".to_string(), "vA\tx".to_string())]
        );
    }

    #[test]
    fn meta_properties_file_round_trip() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("meta.properties");
        let m = MetaProperties {
            version: MetaPropertiesVersion::V0,
            cluster_id: Some("c:1 =#!".into()),
            node_id: Some(0),
            directory_id: None,
        };
        m.write(&path).expect("write");
        assert_eq!(MetaProperties::read(&path).expect("read"), m);
    }

    proptest! {
        #[test]
        fn checkpoint_parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = OffsetCheckpoint::parse(&bytes);
            let _ = LeaderEpochCheckpoint::parse(&bytes);
            let _ = MetaProperties::parse(&bytes);
        }

        #[test]
        fn checkpoint_text_never_panics(text in "[0-9 a\\n\\r\\t-]{0,80}") {
            let _ = OffsetCheckpoint::parse(text.as_bytes());
            let _ = LeaderEpochCheckpoint::parse(text.as_bytes());
        }

        #[test]
        fn offset_checkpoint_round_trip(entries in proptest::collection::vec(
            ("[a-zA-Z0-9._-]{1,30}", any::<i32>(), any::<i64>()), 0..20)) {
            let cp = OffsetCheckpoint { entries: entries.into_iter()
                .map(|(topic, partition, offset)| OffsetCheckpointEntry { topic, partition, offset }).collect() };
            prop_assert_eq!(OffsetCheckpoint::parse(cp.encode().as_bytes()), Ok(cp));
        }

        #[test]
        fn epoch_checkpoint_round_trip(entries in proptest::collection::vec((any::<i32>(), any::<i64>()), 0..20)) {
            let entries: Vec<_> = entries.into_iter()
                .map(|(epoch, start_offset)| EpochEntry { epoch, start_offset }).collect();
            let cp = LeaderEpochCheckpoint::new(entries);
            prop_assert_eq!(LeaderEpochCheckpoint::parse(cp.encode().as_bytes()).map(|c| c.entries), Ok(cp.entries));
        }

        #[test]
        fn meta_properties_round_trip(cluster in "\\PC{0,30}", node in any::<i32>(), v1 in any::<bool>(), id in any::<[u8; 16]>()) {
            let m = MetaProperties {
                version: if v1 { MetaPropertiesVersion::V1 } else { MetaPropertiesVersion::V0 },
                cluster_id: Some(cluster),
                node_id: Some(node),
                directory_id: Some(Uuid(id)),
            };
            let text = m.encode();
            prop_assert!(text.is_ascii());
            prop_assert_eq!(MetaProperties::parse(text.as_bytes()), Ok(m));
        }
    }
}
