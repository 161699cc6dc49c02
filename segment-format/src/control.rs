//! Control records: transaction markers (and the KRaft control types, which we
//! only name).
//!
//! A control batch (attribute bit 5) carries one record whose key is
//! `version i16 | type i16` (`ControlRecordType`: 0 ABORT, 1 COMMIT, 2..=6 KRaft).
//! For ABORT/COMMIT the value is the end-transaction marker
//! `version i16 | coordinator_epoch i32` (`EndTransactionMarker`); Kafka parses
//! longer values with a higher version as version 0. The broker decodes this first
//! record even on a shallow load (producer state and the transaction index depend
//! on it), so the log scan decodes it too.

use std::ops::ControlFlow;

use crate::batch::{BatchHeader, Compression, ControlType, NO_SEQUENCE};
use crate::error::{Defect, ParseError};
use crate::record::{for_each_record, BatchBuilder, DeepLimits, RecordSpec};

/// `ControlRecordType.CURRENT_CONTROL_RECORD_KEY_SIZE`.
pub const CONTROL_KEY_SIZE: usize = 4;
/// `EndTransactionMarker.CURRENT_END_TXN_MARKER_VALUE_SIZE`.
pub const END_TXN_MARKER_VALUE_SIZE: usize = 6;

/// An end-transaction marker (the value of an ABORT or COMMIT control record).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndTxnMarker {
    /// `ControlType::Abort` or `ControlType::Commit`.
    pub control_type: ControlType,
    pub coordinator_epoch: i32,
}

/// The first record of a control batch, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlRecord {
    pub control_type: ControlType,
    /// Present for ABORT and COMMIT.
    pub marker: Option<EndTxnMarker>,
}

/// `ControlRecordType.parseTypeId`: at least 4 bytes, version >= 0 (a higher
/// version is read as version 0).
pub fn parse_control_key(key: Option<&[u8]>) -> Result<ControlType, String> {
    let key = key.ok_or("control record has a null key")?;
    let (Some(v), Some(t)) = (key.get(0..2), key.get(2..4)) else {
        return Err(format!(
            "control record key is {} bytes, at least {CONTROL_KEY_SIZE} needed",
            key.len()
        ));
    };
    let version = i16::from_be_bytes([v[0], v[1]]);
    if version < 0 {
        return Err(format!("control record key version {version} is negative"));
    }
    Ok(ControlType::from_id(i16::from_be_bytes([t[0], t[1]])))
}

/// `EndTransactionMarker.deserializeValue`: at least 6 bytes, version >= 0.
pub fn parse_end_txn_marker(control_type: ControlType, value: Option<&[u8]>) -> Result<EndTxnMarker, String> {
    let value = value.ok_or("end transaction marker has a null value")?;
    let (Some(v), Some(e)) = (value.get(0..2), value.get(2..6)) else {
        return Err(format!(
            "end transaction marker value is {} bytes, at least {END_TXN_MARKER_VALUE_SIZE} needed",
            value.len()
        ));
    };
    let version = i16::from_be_bytes([v[0], v[1]]);
    if version < 0 {
        return Err(format!("end transaction marker version {version} is negative"));
    }
    Ok(EndTxnMarker {
        control_type,
        coordinator_epoch: i32::from_be_bytes([e[0], e[1], e[2], e[3]]),
    })
}

/// Decode the first record of a control batch. `Ok(None)` for a control batch
/// without records (a transaction fully removed by compaction), which Kafka
/// ignores. `batch` starts at the batch; error positions are relative to it. Only
/// the first record is read and checked (as the broker does); use
/// [`crate::record::for_each_record`] to check them all.
pub fn decode_control_batch(
    batch: &[u8],
    header: &BatchHeader,
    limits: &DeepLimits,
) -> Result<Option<ControlRecord>, ParseError> {
    if !header.is_control() {
        return Err(ParseError::Corrupt {
            position: 21,
            offset: Some(header.base_offset),
            defect: Defect::Control {
                message: "not a control batch".into(),
            },
        });
    }
    if header.records_count == 0 {
        return Ok(None);
    }
    let mut found: Option<Result<ControlRecord, (u64, i64, String)>> = None;
    for_each_record(batch, header, limits, |r| {
        let position = if r.compressed { 0 } else { r.position };
        let decoded = parse_control_key(r.key).and_then(|control_type| {
            let marker = match control_type {
                ControlType::Abort | ControlType::Commit => Some(parse_end_txn_marker(control_type, r.value)?),
                ControlType::Other(_) => None,
            };
            Ok(ControlRecord { control_type, marker })
        });
        found = Some(decoded.map_err(|m| (position, r.offset, m)));
        ControlFlow::Break(())
    })?;
    match found {
        Some(Ok(record)) => Ok(Some(record)),
        Some(Err((position, offset, message))) => Err(ParseError::Corrupt {
            position,
            offset: Some(offset),
            defect: Defect::Control { message },
        }),
        // records_count > 0 but the walk saw no record: for_each_record reports that.
        None => Ok(None),
    }
}

/// The control type of an uncompressed control batch, for the shallow scan: one
/// small record, read in place. `None` if the batch is not a control batch, is
/// compressed (Kafka never writes such), has no records, or its first record
/// cannot be decoded.
pub fn shallow_control_type(batch: &[u8], header: &BatchHeader) -> Option<ControlType> {
    if !header.is_control() || header.attributes.compression() != Some(Compression::None) {
        return None;
    }
    decode_control_batch(batch, header, &DeepLimits::default())
        .ok()
        .flatten()
        .map(|c| c.control_type)
}

/// The control record key bytes.
pub fn control_key(control_type: ControlType) -> [u8; CONTROL_KEY_SIZE] {
    let mut k = [0u8; CONTROL_KEY_SIZE];
    k[2..4].copy_from_slice(&control_type.id().to_be_bytes());
    k
}

/// The end-transaction marker value bytes (version 0).
pub fn end_txn_marker_value(coordinator_epoch: i32) -> [u8; END_TXN_MARKER_VALUE_SIZE] {
    let mut v = [0u8; END_TXN_MARKER_VALUE_SIZE];
    v[2..6].copy_from_slice(&coordinator_epoch.to_be_bytes());
    v
}

/// A COMMIT/ABORT marker batch exactly as `MemoryRecords.withEndTransactionMarker`
/// writes it: magic 2, uncompressed, CreateTime, transactional + control,
/// baseSequence -1, one record at offset delta 0 with the given timestamp.
pub fn end_txn_marker_batch(
    base_offset: i64,
    timestamp: i64,
    partition_leader_epoch: i32,
    producer_id: i64,
    producer_epoch: i16,
    marker: EndTxnMarker,
) -> Vec<u8> {
    BatchBuilder::new(base_offset)
        .partition_leader_epoch(partition_leader_epoch)
        .producer(producer_id, producer_epoch, NO_SEQUENCE)
        .transactional(true)
        .control(true)
        .record(
            RecordSpec::new(0, timestamp)
                .with_key(control_key(marker.control_type))
                .with_value(end_txn_marker_value(marker.coordinator_epoch)),
        )
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{parse_header, verify_crc, Attributes};
    use crate::record::RecordSpec;

    fn limits() -> DeepLimits {
        DeepLimits::default()
    }

    #[test]
    fn marker_batch_is_byte_exact() {
        let marker = EndTxnMarker {
            control_type: ControlType::Commit,
            coordinator_epoch: 0x0102_0304,
        };
        let b = end_txn_marker_batch(1000, 1_700_000_000_123, 5, 77, 2, marker);
        // Record: body 16 bytes (length varint zig-zag 32 = 0x20), attributes 0, ts delta 0,
        // offset delta 0, key length 4 (0x08) + key, value length 6 (0x0c) + value, 0 headers.
        let mut rec = vec![0x20u8, 0, 0, 0, 0x08, 0, 0, 0, 1, 0x0c, 0, 0, 1, 2, 3, 4, 0x00];
        let mut expected = Vec::new();
        expected.extend_from_slice(&1000i64.to_be_bytes());
        expected.extend_from_slice(&((49 + rec.len()) as i32).to_be_bytes());
        expected.extend_from_slice(&5i32.to_be_bytes());
        expected.push(2);
        expected.extend_from_slice(&[0; 4]);
        expected.extend_from_slice(&(Attributes::TRANSACTIONAL | Attributes::CONTROL).to_be_bytes());
        expected.extend_from_slice(&0i32.to_be_bytes());
        expected.extend_from_slice(&1_700_000_000_123i64.to_be_bytes());
        expected.extend_from_slice(&1_700_000_000_123i64.to_be_bytes());
        expected.extend_from_slice(&77i64.to_be_bytes());
        expected.extend_from_slice(&2i16.to_be_bytes());
        expected.extend_from_slice(&(-1i32).to_be_bytes());
        expected.extend_from_slice(&1i32.to_be_bytes());
        expected.append(&mut rec);
        let crc = crc32c::crc32c(&expected[21..]);
        expected[17..21].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(b, expected);
        // 61 + EndTransactionMarker.CURRENT_END_TXN_SCHEMA_RECORD_SIZE (17).
        assert_eq!(b.len(), 78);

        let h = parse_header(&b).unwrap();
        verify_crc(&b, &h).unwrap();
        let decoded = decode_control_batch(&b, &h, &limits()).unwrap().unwrap();
        assert_eq!(
            decoded,
            ControlRecord {
                control_type: ControlType::Commit,
                marker: Some(marker)
            }
        );
        assert_eq!(shallow_control_type(&b, &h), Some(ControlType::Commit));
    }

    #[test]
    fn abort_marker_round_trips() {
        let marker = EndTxnMarker {
            control_type: ControlType::Abort,
            coordinator_epoch: -3,
        };
        let b = end_txn_marker_batch(0, 1, -1, 5, 0, marker);
        let h = parse_header(&b).unwrap();
        assert_eq!(
            decode_control_batch(&b, &h, &limits()).unwrap().unwrap().marker,
            Some(marker)
        );
    }

    fn control_batch(key: Option<Vec<u8>>, value: Option<Vec<u8>>) -> Vec<u8> {
        let mut r = RecordSpec::new(0, 10);
        r.key = key;
        r.value = value;
        BatchBuilder::new(0)
            .producer(1, 0, -1)
            .transactional(true)
            .control(true)
            .record(r)
            .build()
    }

    #[test]
    fn key_and_value_rules() {
        // Higher versions and longer values parse as version 0.
        let b = control_batch(Some(vec![0, 3, 0, 0, 9]), Some(vec![0, 7, 0, 0, 0, 9, 1, 1]));
        let h = parse_header(&b).unwrap();
        let c = decode_control_batch(&b, &h, &limits()).unwrap().unwrap();
        assert_eq!(c.control_type, ControlType::Abort);
        assert_eq!(c.marker.unwrap().coordinator_epoch, 9);
        // KRaft types: no marker.
        let b = control_batch(Some(vec![0, 0, 0, 2]), Some(vec![1, 2, 3]));
        let h = parse_header(&b).unwrap();
        let c = decode_control_batch(&b, &h, &limits()).unwrap().unwrap();
        assert_eq!((c.control_type, c.marker), (ControlType::Other(2), None));

        for (key, value, needle) in [
            (Some(vec![0, 0, 1]), Some(vec![0; 6]), "at least 4"),
            (None, Some(vec![0; 6]), "null key"),
            (Some(vec![0xff, 0xff, 0, 1]), Some(vec![0; 6]), "version -1"),
            (Some(vec![0, 0, 0, 1]), Some(vec![0; 5]), "at least 6"),
            (Some(vec![0, 0, 0, 0]), None, "null value"),
            (Some(vec![0, 0, 0, 0]), Some(vec![0x80, 0, 0, 0, 0, 0]), "negative"),
        ] {
            let b = control_batch(key, value);
            let h = parse_header(&b).unwrap();
            let err = decode_control_batch(&b, &h, &limits()).unwrap_err();
            match err {
                ParseError::Corrupt {
                    position,
                    defect: Defect::Control { message },
                    ..
                } => {
                    assert!(message.contains(needle), "{message}");
                    assert_eq!(position, 61, "the record's position in the batch");
                }
                other => panic!("{other:?}"),
            }
            assert_eq!(shallow_control_type(&b, &h), None);
        }
    }

    #[test]
    fn empty_control_batch_is_none() {
        let b = BatchBuilder::new(9)
            .producer(1, 0, -1)
            .transactional(true)
            .control(true)
            .max_timestamp(5)
            .build();
        let h = parse_header(&b).unwrap();
        assert_eq!(decode_control_batch(&b, &h, &limits()).unwrap(), None);
        assert_eq!(shallow_control_type(&b, &h), None);
    }

    #[test]
    fn compressed_control_batch_decodes_deeply_but_not_shallowly() {
        let b = BatchBuilder::new(0)
            .compression(Compression::Gzip)
            .producer(1, 0, -1)
            .transactional(true)
            .control(true)
            .record(
                RecordSpec::new(0, 1)
                    .with_key(control_key(ControlType::Commit))
                    .with_value(end_txn_marker_value(4)),
            )
            .build();
        let h = parse_header(&b).unwrap();
        assert_eq!(
            decode_control_batch(&b, &h, &limits()).unwrap().unwrap().control_type,
            ControlType::Commit
        );
        assert_eq!(shallow_control_type(&b, &h), None);
    }

    #[test]
    fn non_control_batch_is_refused() {
        let b = BatchBuilder::new(0).record(RecordSpec::new(0, 0)).build();
        let h = parse_header(&b).unwrap();
        assert!(decode_control_batch(&b, &h, &limits()).is_err());
        assert_eq!(shallow_control_type(&b, &h), None);
    }
}
