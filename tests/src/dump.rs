//! Kafka's own reading of segment files: the output of `DumpLogSegments`, parsed.
//!
//! Why: a test that checks our reader against numbers our reader produced proves nothing. `DumpLogSegments` is
//! Kafka's reader (`FileRecords` + `DefaultRecordBatch`), so comparing every batch it prints — offsets, counts,
//! positions, sizes, CRCs, codecs, flags — with what `segment-format` reads is an independent check, and its
//! `--deep-iteration` record lines give per-record offsets and sizes. Only magic-2 batch lines are parsed (what
//! Kafka 4.x writes); anything else is kept as an unparsed line so a test can still search it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use crate::install::{kafka_support_dir, KafkaInstall};
use crate::tools::DUMP_LOG_SEGMENTS;

/// One `| offset: ...` line of `--deep-iteration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpedRecord {
    pub offset: i64,
    /// `CreateTime` or `LogAppendTime`.
    pub timestamp_type: String,
    pub timestamp: i64,
    /// `-1` for a null key (absent for control records).
    pub key_size: Option<i64>,
    pub value_size: Option<i64>,
    /// `endTxnMarker: COMMIT|ABORT` of a transaction marker.
    pub end_txn_marker: Option<String>,
}

/// One `baseOffset: ...` line: a magic-2 batch as Kafka read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpedBatch {
    pub base_offset: i64,
    pub last_offset: i64,
    pub count: i64,
    pub producer_id: i64,
    pub producer_epoch: i64,
    pub base_sequence: i64,
    pub partition_leader_epoch: i64,
    pub is_transactional: bool,
    pub is_control: bool,
    pub position: u64,
    pub timestamp_type: String,
    /// The batch max timestamp.
    pub max_timestamp: i64,
    pub size: u64,
    pub magic: i8,
    /// `none`, `gzip`, `snappy`, `lz4`, `zstd`.
    pub codec: String,
    pub crc: u32,
    pub is_valid: bool,
    /// With `--deep-iteration`.
    pub records: Vec<DumpedRecord>,
}

/// Everything printed for one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DumpedFile {
    pub batches: Vec<DumpedBatch>,
    /// Lines that are neither a batch nor a record line (headers, index entries, warnings).
    pub other_lines: Vec<String>,
}

/// What one `DumpLogSegments` run printed. Kafka prints its findings (index mismatches, timestamp mismatches,
/// non-consecutive offsets, unreadable files) on **stderr** and exits 0 regardless, so both streams matter.
#[derive(Debug, Clone)]
pub struct DumpOutput {
    pub stdout: String,
    pub stderr: String,
}

/// Runs `DumpLogSegments --files <files> <args>` (one JVM); fails only if the tool exits non-zero.
pub fn run_dump(install: &'static KafkaInstall, files: &[PathBuf], args: &[&str]) -> Result<DumpOutput> {
    let list: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let out = install
        .java(256, &kafka_support_dir().join("tools-log4j2.properties"))
        .arg(install.main_class(DUMP_LOG_SEGMENTS))
        .arg("--files")
        .arg(list.join(","))
        .args(args)
        .output()
        .context("running DumpLogSegments")?;
    let dump = DumpOutput {
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    if !out.status.success() {
        bail!("DumpLogSegments failed ({}):\n{}", out.status, dump.stderr);
    }
    Ok(dump)
}

/// Runs `DumpLogSegments --deep-iteration` over `files` (one JVM) and parses stdout per file.
pub fn dump_deep(
    install: &'static KafkaInstall,
    files: &[PathBuf],
) -> Result<(BTreeMap<PathBuf, DumpedFile>, DumpOutput)> {
    if files.is_empty() {
        return Ok((
            BTreeMap::new(),
            DumpOutput {
                stdout: String::new(),
                stderr: String::new(),
            },
        ));
    }
    let out = run_dump(install, files, &["--deep-iteration"])?;
    Ok((parse_dump(&out.stdout)?, out))
}

/// `key: value` pairs of a DumpLogSegments line (`key:` tokens followed by one value token).
fn fields(line: &str) -> BTreeMap<&str, &str> {
    let tokens: Vec<&str> = line.trim_start_matches('|').split_whitespace().collect();
    let mut out = BTreeMap::new();
    let mut i = 0;
    while i < tokens.len() {
        if let Some(key) = tokens[i].strip_suffix(':') {
            if let Some(value) = tokens.get(i + 1) {
                out.insert(key, *value);
                i += 2;
                continue;
            }
        }
        i += 1;
    }
    out
}

fn field<T: std::str::FromStr>(f: &BTreeMap<&str, &str>, key: &str, line: &str) -> Result<T>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    f.get(key)
        .with_context(|| format!("no {key} in {line:?}"))?
        .parse()
        .with_context(|| format!("bad {key} in {line:?}"))
}

/// The timestamp type and value of a line: whichever of `CreateTime:` / `LogAppendTime:` / `NoTimestampType:`
/// it carries.
fn timestamp(f: &BTreeMap<&str, &str>, line: &str) -> Result<(String, i64)> {
    for kind in ["CreateTime", "LogAppendTime", "NoTimestampType"] {
        if f.contains_key(kind) {
            return Ok((kind.to_string(), field(f, kind, line)?));
        }
    }
    bail!("no timestamp in {line:?}")
}

/// Parses DumpLogSegments output (sections start with `Dumping <path>`).
pub fn parse_dump(out: &str) -> Result<BTreeMap<PathBuf, DumpedFile>> {
    let mut files: BTreeMap<PathBuf, DumpedFile> = BTreeMap::new();
    let mut current: Option<PathBuf> = None;
    for line in out.lines() {
        if let Some(path) = line.strip_prefix("Dumping ") {
            let path = PathBuf::from(path.trim());
            files.entry(path.clone()).or_default();
            current = Some(path);
            continue;
        }
        let Some(file) = current.as_ref().and_then(|p| files.get_mut(p)) else {
            continue;
        };
        if line.starts_with("baseOffset:") {
            let f = fields(line);
            let (timestamp_type, max_timestamp) = timestamp(&f, line)?;
            file.batches.push(DumpedBatch {
                base_offset: field(&f, "baseOffset", line)?,
                last_offset: field(&f, "lastOffset", line)?,
                count: field(&f, "count", line)?,
                producer_id: field(&f, "producerId", line)?,
                producer_epoch: field(&f, "producerEpoch", line)?,
                base_sequence: field(&f, "baseSequence", line)?,
                partition_leader_epoch: field(&f, "partitionLeaderEpoch", line)?,
                is_transactional: field(&f, "isTransactional", line)?,
                is_control: field(&f, "isControl", line)?,
                position: field(&f, "position", line)?,
                timestamp_type,
                max_timestamp,
                size: field(&f, "size", line)?,
                magic: field(&f, "magic", line)?,
                codec: field(&f, "compresscodec", line)?,
                crc: field(&f, "crc", line)?,
                is_valid: field(&f, "isvalid", line)?,
                records: Vec::new(),
            });
        } else if line.starts_with("| offset:") {
            let f = fields(line);
            let (timestamp_type, timestamp) = timestamp(&f, line)?;
            let record = DumpedRecord {
                offset: field(&f, "offset", line)?,
                timestamp_type,
                timestamp,
                key_size: f.get("keySize").map(|v| v.parse()).transpose()?,
                value_size: f.get("valueSize").map(|v| v.parse()).transpose()?,
                end_txn_marker: f.get("endTxnMarker").map(|v| v.to_string()),
            };
            match file.batches.last_mut() {
                Some(batch) => batch.records.push(record),
                None => bail!("record line before any batch: {line:?}"),
            }
        } else if !line.trim().is_empty() {
            file.other_lines.push(line.to_string());
        }
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn parses_batches_and_records() {
        let out = "Dumping /d/t-0/00000000000000000000.log\nLog starting offset: 0\n\
            baseOffset: 0 lastOffset: 1 count: 2 baseSequence: 0 lastSequence: 1 producerId: 2 producerEpoch: 0 \
            partitionLeaderEpoch: 3 isTransactional: true isControl: false deleteHorizonMs: OptionalLong.empty \
            position: 0 CreateTime: 17 size: 90 magic: 2 compresscodec: zstd crc: 4000000000 isvalid: true\n\
            | offset: 0 CreateTime: 16 keySize: -1 valueSize: 5 sequence: 0 headerKeys: [a,b]\n\
            | offset: 1 CreateTime: 17 keySize: 3 valueSize: -1 sequence: 1 headerKeys: []\n\
            baseOffset: 2 lastOffset: 2 count: 1 baseSequence: -1 lastSequence: -1 producerId: 2 producerEpoch: 0 \
            partitionLeaderEpoch: 3 isTransactional: true isControl: true deleteHorizonMs: OptionalLong.empty \
            position: 90 LogAppendTime: 18 size: 78 magic: 2 compresscodec: none crc: 1 isvalid: false\n\
            | offset: 2 LogAppendTime: 18 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] endTxnMarker: ABORT \
            coordinatorEpoch: 0\n";
        let files = parse_dump(out).unwrap();
        let file = &files[Path::new("/d/t-0/00000000000000000000.log")];
        assert_eq!(file.other_lines, ["Log starting offset: 0"]);
        let [a, b] = &file.batches[..] else { panic!("{file:?}") };
        assert_eq!(
            (a.base_offset, a.last_offset, a.count, a.size, a.crc),
            (0, 1, 2, 90, 4_000_000_000)
        );
        assert_eq!(
            (a.codec.as_str(), a.is_valid, a.is_control, a.partition_leader_epoch),
            ("zstd", true, false, 3)
        );
        assert_eq!(a.records.len(), 2);
        assert_eq!((a.records[0].key_size, a.records[0].value_size), (Some(-1), Some(5)));
        assert_eq!(
            (b.timestamp_type.as_str(), b.max_timestamp, b.is_valid),
            ("LogAppendTime", 18, false)
        );
        assert_eq!(b.records[0].end_txn_marker.as_deref(), Some("ABORT"));
    }
}
