//! What `segment-format` reads from a partition directory, in the harness's own terms.
//!
//! The real-Kafka tests compare three views of the same bytes: what the producer sent (acknowledged offsets and
//! timestamps), what Kafka's `DumpLogSegments` prints, and what our reader decodes. This module is the third:
//! every batch header of every live segment, and every data record decoded (decompressed) into the same
//! [`Record`] type the clients return, so one `assert_eq!` compares our decoding with a producer's or a
//! consumer's view. Only magic-2 batches are decoded: Kafka 4.x writes nothing else.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use segment_format::batch::{parse_header, BatchHeader, BatchInfo, TimestampType as DiskTimestampType};
use segment_format::dir::PartitionDir;
use segment_format::log::LogFile;
use segment_format::record::{for_each_record, DeepLimits};

use crate::clients::{Header, Record, TimestampType};

/// One magic-2 batch as our shallow scan reads it: the summary the verifier works on and the full header.
#[derive(Debug, Clone, Copy)]
pub struct ScannedBatch {
    pub info: BatchInfo,
    pub header: BatchHeader,
}

/// One live segment and its batches.
#[derive(Debug, Clone)]
pub struct ScannedSegment {
    pub base_offset: i64,
    pub log: PathBuf,
    pub batches: Vec<ScannedBatch>,
    /// Bytes of the `.log` file.
    pub size: u64,
}

/// Scans one `.log` file; fails on a framing error, a partial batch, a CRC mismatch or a legacy (magic 0/1)
/// frame.
pub fn scan_log(path: &Path) -> Result<Vec<ScannedBatch>> {
    let mut log = LogFile::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut batches = Vec::new();
    let mut failure = None;
    log.scan(|frame| {
        let at = frame.info.position;
        let problem = if !frame.crc_matches() {
            Some(format!("CRC mismatch in the batch at byte {at}"))
        } else {
            match parse_header(frame.bytes) {
                Ok(header) => {
                    batches.push(ScannedBatch {
                        info: frame.info,
                        header,
                    });
                    None
                }
                Err(e) => Some(e.shifted(at).at(path).to_string()),
            }
        };
        match problem {
            Some(p) => {
                failure = Some(p);
                ControlFlow::Break(())
            }
            None => ControlFlow::Continue(()),
        }
    })
    .with_context(|| format!("scanning {}", path.display()))?;
    if let Some(message) = failure {
        bail!("{}: {message}", path.display());
    }
    Ok(batches)
}

/// Every live segment of a partition directory (no `.deleted`/`.cleaned`/`.swap` files), in offset order.
pub fn scan_partition(dir: &Path) -> Result<Vec<ScannedSegment>> {
    let listing = PartitionDir::open(dir).with_context(|| format!("listing {}", dir.display()))?;
    listing
        .segments
        .iter()
        .map(|s| {
            Ok(ScannedSegment {
                base_offset: s.base_offset,
                batches: scan_log(&s.log)?,
                size: std::fs::metadata(&s.log)?.len(),
                log: s.log.clone(),
            })
        })
        .collect()
}

/// Every data record (control records skipped) of a partition directory, decoded by our reader, as a
/// [`Record`] of partition `partition`, in offset order.
pub fn partition_records(dir: &Path, partition: i32) -> Result<Vec<Record>> {
    let listing = PartitionDir::open(dir).with_context(|| format!("listing {}", dir.display()))?;
    let mut out = Vec::new();
    for segment in &listing.segments {
        out.extend(log_records(&segment.log, partition)?);
    }
    Ok(out)
}

/// Every data record of one `.log` file (see [`partition_records`]).
pub fn log_records(path: &Path, partition: i32) -> Result<Vec<Record>> {
    let mut log = LogFile::open(path).with_context(|| format!("opening {}", path.display()))?;
    let limits = DeepLimits::default();
    let mut out = Vec::new();
    let mut failure = None;
    log.scan(|frame| {
        if frame.info.is_control {
            return ControlFlow::Continue(());
        }
        let walked = parse_header(frame.bytes).and_then(|header| {
            let timestamp_type = match header.attributes.timestamp_type() {
                DiskTimestampType::CreateTime => TimestampType::CreateTime,
                DiskTimestampType::LogAppendTime => TimestampType::LogAppendTime,
            };
            for_each_record(frame.bytes, &header, &limits, |r| {
                out.push(Record {
                    partition,
                    offset: r.offset,
                    timestamp: r.timestamp,
                    timestamp_type,
                    key: r.key.map(<[u8]>::to_vec),
                    value: r.value.map(<[u8]>::to_vec),
                    headers: r
                        .headers()
                        .map(|h| Header {
                            key: h.key.to_string(),
                            value: h.value.map(<[u8]>::to_vec),
                        })
                        .collect(),
                });
                ControlFlow::Continue(())
            })
        });
        match walked {
            Ok(_) => ControlFlow::Continue(()),
            Err(e) => {
                failure = Some(e.shifted(frame.info.position).at(path).to_string());
                ControlFlow::Break(())
            }
        }
    })
    .with_context(|| format!("scanning {}", path.display()))?;
    if let Some(message) = failure {
        bail!("{message}");
    }
    Ok(out)
}

/// FNV-1a (64 bit) over a canonical encoding of `records` (partition excluded): a short fingerprint of
/// offsets, timestamps, timestamp types, keys, values and headers that a fixture manifest can carry.
pub fn records_digest(records: &[Record]) -> String {
    fn put(h: &mut u64, bytes: &[u8]) {
        for b in bytes {
            *h ^= u64::from(*b);
            *h = h.wrapping_mul(0x0000_0100_0000_01B3);
        }
    }
    fn put_opt(h: &mut u64, bytes: &Option<Vec<u8>>) {
        match bytes {
            None => put(h, &(-1i64).to_be_bytes()),
            Some(b) => {
                put(h, &(b.len() as i64).to_be_bytes());
                put(h, b);
            }
        }
    }
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for r in records {
        put(&mut h, &r.offset.to_be_bytes());
        put(&mut h, &r.timestamp.to_be_bytes());
        put(
            &mut h,
            &[match r.timestamp_type {
                TimestampType::CreateTime => 0,
                TimestampType::LogAppendTime => 1,
                TimestampType::NoTimestamp => 2,
            }],
        );
        put_opt(&mut h, &r.key);
        put_opt(&mut h, &r.value);
        put(&mut h, &(r.headers.len() as i64).to_be_bytes());
        for header in &r.headers {
            put_opt(&mut h, &Some(header.key.as_bytes().to_vec()));
            put_opt(&mut h, &header.value);
        }
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(offset: i64, key: Option<&[u8]>) -> Record {
        Record {
            partition: 0,
            offset,
            timestamp: 5,
            timestamp_type: TimestampType::CreateTime,
            key: key.map(<[u8]>::to_vec),
            value: Some(b"v".to_vec()),
            headers: vec![],
        }
    }

    #[test]
    fn digest_tells_null_from_empty_and_order_matters() {
        let a = records_digest(&[record(0, None), record(1, Some(b""))]);
        assert_eq!(a.len(), 16);
        assert_eq!(a, records_digest(&[record(0, None), record(1, Some(b""))]));
        assert_ne!(a, records_digest(&[record(0, Some(b"")), record(1, None)]));
        assert_ne!(a, records_digest(&[record(1, Some(b"")), record(0, None)]));
        assert_eq!(records_digest(&[]), "cbf29ce484222325");
    }
}
