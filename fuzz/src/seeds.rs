//! Seed inputs for each target, built with the crate's own encoders so the
//! fuzzer starts from well-formed files (every codec, control batches, legacy
//! wrappers, matching indexes) and mutates from there instead of having to
//! discover the formats byte by byte.

use segment_format::batch::{Compression, ControlType, TimestampType};
use segment_format::checkpoint::{
    EpochEntry, LeaderEpochCheckpoint, MetaProperties, MetaPropertiesVersion, OffsetCheckpoint, OffsetCheckpointEntry,
};
use segment_format::control::{end_txn_marker_batch, EndTxnMarker};
use segment_format::index::{OffsetIndexBuilder, TimeIndexBuilder};
use segment_format::legacy::{encode_message, encode_wrapper, LegacySpec};
use segment_format::log::scan_frames;
use segment_format::partition_metadata::{PartitionMetadata, Uuid};
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::snapshot::{ProducerSnapshot, ProducerSnapshotEntry};
use segment_format::txn_index::{self, TxnTracker};

use crate::IndexInput;

fn specs(first_delta: i32, n: i32) -> Vec<RecordSpec> {
    (0..n)
        .map(|i| {
            RecordSpec::new(first_delta + i, 1_700_000_000_000 + i64::from(i))
                .with_key(format!("k{i}"))
                .with_value(vec![b'v'; (i as usize % 3) * 7])
                .with_header("h", Some(vec![i as u8]))
        })
        .collect()
}

/// Single batches of every shape the targets should know.
pub fn batches() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for codec in Compression::ALL {
        out.push(
            BatchBuilder::new(0)
                .compression(codec)
                .partition_leader_epoch(1)
                .records(specs(0, 3))
                .build(),
        );
    }
    out.push(
        BatchBuilder::new(10)
            .producer(7, 0, 0)
            .transactional(true)
            .log_append_time(1_700_000_000_500)
            .records(specs(0, 2))
            .build(),
    );
    out.push(
        BatchBuilder::new(20)
            .compression(Compression::Zstd)
            .delete_horizon(1_700_000_000_000)
            .records(specs(1, 2))
            .build(),
    );
    out.push(
        BatchBuilder::new(30)
            .control(true)
            .transactional(true)
            .producer(7, 0, -1)
            .build(),
    );
    for control_type in [ControlType::Commit, ControlType::Abort] {
        out.push(end_txn_marker_batch(
            40,
            1_700_000_000_000,
            1,
            7,
            0,
            EndTxnMarker {
                control_type,
                coordinator_epoch: 3,
            },
        ));
    }
    for magic in [0, 1] {
        out.push(encode_message(
            50,
            magic,
            1_700_000_000_000,
            TimestampType::CreateTime,
            Some(b"k"),
            Some(b"v"),
        ));
        out.push(encode_message(51, magic, -1, TimestampType::CreateTime, None, None));
        for codec in [Compression::Gzip, Compression::Snappy, Compression::Lz4] {
            let inner: Vec<LegacySpec> = (0..3)
                .map(|i| LegacySpec {
                    offset: 60 + i,
                    timestamp: 1_700_000_000_000 + i,
                    key: Some(vec![b'k'; i as usize]),
                    value: Some(vec![b'v'; 5]),
                })
                .collect();
            out.push(encode_wrapper(magic, codec, TimestampType::CreateTime, -1, &inner));
        }
    }
    out
}

/// Whole segments: a transactional story (data, abort, commit), every codec,
/// legacy frames after a v2 prefix, and a cut-off tail.
pub fn segments() -> Vec<Vec<u8>> {
    let mut txn = Vec::new();
    txn.extend(
        BatchBuilder::new(100)
            .producer(7, 0, 0)
            .transactional(true)
            .records(specs(0, 2))
            .build(),
    );
    txn.extend(
        BatchBuilder::new(102)
            .producer(8, 0, 0)
            .transactional(true)
            .records(specs(0, 1))
            .build(),
    );
    let abort = EndTxnMarker {
        control_type: ControlType::Abort,
        coordinator_epoch: 1,
    };
    let commit = EndTxnMarker {
        control_type: ControlType::Commit,
        coordinator_epoch: 1,
    };
    txn.extend(end_txn_marker_batch(103, 1_700_000_000_100, 0, 7, 0, abort));
    txn.extend(
        BatchBuilder::new(104)
            .compression(Compression::Lz4)
            .records(specs(0, 4))
            .build(),
    );
    txn.extend(end_txn_marker_batch(108, 1_700_000_000_200, 0, 8, 0, commit));

    let mut codecs = Vec::new();
    let mut base = 0;
    for codec in Compression::ALL {
        codecs.extend(
            BatchBuilder::new(base)
                .compression(codec)
                .partition_leader_epoch(2)
                .records(specs(0, 5))
                .build(),
        );
        base += 5;
    }

    let mut legacy = Vec::new();
    legacy.extend(encode_message(
        0,
        0,
        -1,
        TimestampType::CreateTime,
        Some(b"a"),
        Some(b"b"),
    ));
    legacy.extend(encode_message(
        1,
        1,
        1_700_000_000_000,
        TimestampType::CreateTime,
        None,
        Some(b"c"),
    ));
    let inner: Vec<LegacySpec> = (2..5)
        .map(|o| LegacySpec {
            offset: o,
            timestamp: 1_700_000_000_000 + o,
            key: None,
            value: Some(vec![1; 4]),
        })
        .collect();
    legacy.extend(encode_wrapper(
        1,
        Compression::Gzip,
        TimestampType::CreateTime,
        -1,
        &inner,
    ));
    legacy.extend(BatchBuilder::new(5).records(specs(0, 2)).build());

    let mut cut = codecs.clone();
    cut.truncate(cut.len() - 7);

    vec![txn, codecs, legacy, cut, Vec::new()]
}

/// A segment with the indexes and txn index Kafka would write for it.
pub fn index_inputs() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for (n, log) in segments().into_iter().enumerate() {
        let infos: Vec<_> = scan_frames(&log, 0).filter_map(Result::ok).map(|f| f.info).collect();
        let base = infos.first().map_or(0, |b| b.base_offset);
        let flags_interval = 1u8; // (1 + 1) * 64 = 128 bytes between entries
        let interval = (u64::from(flags_interval) + 1) * 64;
        let mut offsets = OffsetIndexBuilder::new(base, interval);
        let mut times = TimeIndexBuilder::new(base, interval);
        let mut tracker = TxnTracker::new();
        let mut aborted = Vec::new();
        for info in &infos {
            let _ = offsets.push(info);
            let _ = times.push(info);
            aborted.extend(tracker.on_batch(info));
        }
        times.seal();
        let input = IndexInput {
            flags: (flags_interval << 4) | 2 | (n as u8 & 1),
            offset_index: offsets.to_bytes(),
            time_index: times.to_bytes(),
            txn_index: txn_index::serialize(&aborted),
            log,
        };
        out.push(input.join());
        // The same with a preallocated (zero) tail on the indexes: an active segment.
        let mut active = input.clone();
        active.flags |= 1;
        active.offset_index.extend([0; 16]);
        active.time_index.extend([0; 24]);
        out.push(active.join());
    }
    out
}

/// Partition-directory inputs for `verify_dir`: base offset 0, so the segment seeds rebased.
pub fn verify_inputs() -> Vec<Vec<u8>> {
    let mut out = index_inputs();
    let epochs = LeaderEpochCheckpoint::new(vec![
        EpochEntry {
            epoch: 0,
            start_offset: 0,
        },
        EpochEntry {
            epoch: 2,
            start_offset: 5,
        },
    ]);
    let mut log = Vec::new();
    for (i, codec) in Compression::ALL.into_iter().enumerate() {
        let epoch = if i == 0 { 0 } else { 2 };
        log.extend(
            BatchBuilder::new(i as i64 * 5)
                .compression(codec)
                .partition_leader_epoch(epoch)
                .records(specs(0, 5))
                .build(),
        );
    }
    let input = IndexInput {
        flags: 4,
        offset_index: Vec::new(),
        time_index: Vec::new(),
        txn_index: epochs.encode().into_bytes(),
        log,
    };
    out.push(input.join());
    out
}

/// Text checkpoints, metadata, snapshots and names.
pub fn text_inputs() -> Vec<Vec<u8>> {
    let offsets = OffsetCheckpoint {
        entries: vec![
            OffsetCheckpointEntry {
                topic: "orders".into(),
                partition: 0,
                offset: 42,
            },
            OffsetCheckpointEntry {
                topic: "__consumer_offsets".into(),
                partition: 49,
                offset: 0,
            },
        ],
    };
    let epochs = LeaderEpochCheckpoint::new(vec![
        EpochEntry {
            epoch: 0,
            start_offset: 0,
        },
        EpochEntry {
            epoch: 3,
            start_offset: 1000,
        },
    ]);
    let v1 = MetaProperties {
        version: MetaPropertiesVersion::V1,
        cluster_id: Some("MkU3OEVBNTcwNTJENDM2Qg".into()),
        node_id: Some(1),
        directory_id: Some(Uuid([7; 16])),
    };
    let v0 = MetaProperties {
        version: MetaPropertiesVersion::V0,
        cluster_id: None,
        node_id: Some(0),
        directory_id: None,
    };
    let metadata = PartitionMetadata::new(Uuid([0x42; 16]));
    let snapshot = ProducerSnapshot {
        entries: vec![
            ProducerSnapshotEntry {
                producer_id: 7,
                epoch: 0,
                last_sequence: 4,
                last_offset: 104,
                offset_delta: 4,
                timestamp: 1_700_000_000_000,
                coordinator_epoch: 1,
                current_txn_first_offset: 100,
            },
            ProducerSnapshotEntry {
                producer_id: 8,
                epoch: 2,
                last_sequence: -1,
                last_offset: -1,
                offset_delta: 0,
                timestamp: -1,
                coordinator_epoch: -1,
                current_txn_first_offset: -1,
            },
        ],
    };
    let mut out: Vec<Vec<u8>> = vec![
        offsets.encode().into_bytes(),
        epochs.encode().into_bytes(),
        v1.encode().into_bytes(),
        v0.encode().into_bytes(),
        b"#comment\n version = 1 \\\n\ncluster.id:abc\r\nnode.id 3\ndirectory.id=AAAAAAAAAAAAAAAAAAAAAQ\n".to_vec(),
        metadata.encode().into_bytes(),
        snapshot.to_bytes(),
        ProducerSnapshot::default().to_bytes(),
    ];
    for name in [
        "orders-0",
        "my.topic-12.5f9d2a7c6b1e4d3f8a0b9c8d7e6f5a4b-delete",
        "t-1.0123456789abcdef0123456789abcdef-future",
        "t-3.x-stray",
        "00000000000000000042.log",
        "00000000000000000042.timeindex.deleted",
        "00000000000000000000.snapshot",
        "partition.metadata.tmp",
        "00000000000000000042.index.swap",
    ] {
        out.push(name.as_bytes().to_vec());
    }
    out
}

/// `prefix \n key \n document` inputs: a manifest and a lease at their keys.
pub fn bucket_inputs() -> Vec<Vec<u8>> {
    use segment_format::dir::SegmentFileKind;
    use segmirror_transport::manifest::{
        EpochStart, KeyPrefix, Lease, Manifest, ManifestFile, PartitionKey, SegmentFileName, SegmentRange,
        Sha256Digest, ShipperStamp, MANIFEST_FORMAT_V1,
    };
    let Ok(prefix) = KeyPrefix::new("backups/kafka") else {
        return Vec::new();
    };
    let Ok(partition) = PartitionKey::new(prefix, "dc1-to-dc2", "orders.v1", 3) else {
        return Vec::new();
    };
    let topic_id = Uuid([7; 16]);
    let Ok(range) = SegmentRange::new(100, 250) else {
        return Vec::new();
    };
    let sizes = [
        (SegmentFileKind::Log, 9000),
        (SegmentFileKind::Index, 16),
        (SegmentFileKind::TimeIndex, 24),
    ];
    let files: Vec<ManifestFile> = sizes
        .into_iter()
        .filter_map(|(kind, size)| {
            let name = SegmentFileName::new(100, kind);
            Some(ManifestFile {
                name,
                key: partition.data_key(&topic_id, range, name).ok()?,
                size,
                crc32c: 0xdead_beef,
                sha256: Sha256Digest([0xab; 32]),
                mtime_ms: 1_700_000_000_000,
            })
        })
        .collect();
    let manifest = Manifest {
        format: MANIFEST_FORMAT_V1.into(),
        link: "dc1-to-dc2".into(),
        topic: "orders.v1".into(),
        partition: 3,
        source_topic_id: topic_id,
        source_cluster_id: "MkU3OEVBNTcwNTJENDM2Qk".into(),
        base_offset: 100,
        first_offset: Some(100),
        last_offset: Some(249),
        next_offset: 250,
        batches: 10,
        records: 150,
        max_timestamp: 1_700_000_000_123,
        sealed: true,
        epochs: vec![
            EpochStart {
                epoch: 3,
                start_offset: 40,
            },
            EpochStart {
                epoch: 5,
                start_offset: 200,
            },
        ],
        log_start_offset: 0,
        files: files.clone(),
        end_snapshot: None,
        log_chunks: Vec::new(),
        shipper: ShipperStamp {
            id: "host-a/1234".into(),
            lease_epoch: 2,
        },
        created_at_ms: 1_700_000_001_000,
    };
    let join = |key: &str, doc: &[u8]| {
        let mut out = b"backups/kafka\n".to_vec();
        out.extend_from_slice(key.as_bytes());
        out.push(b'\n');
        out.extend_from_slice(doc);
        out
    };
    let mut out = Vec::new();
    if let Ok(key) = partition.manifest_key(&topic_id, 100) {
        out.push(join(&key, &manifest.to_json()));
    }
    out.push(join(
        &partition.lease_key(2),
        &Lease::new("host-a/1234", 2, 1_700_000_000_000).to_json(),
    ));
    for f in &files {
        out.push(join(&f.key, b""));
    }
    out
}

/// `(target, seeds)` for every target.
pub fn all() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    let mut log = segments();
    log.extend(batches());
    vec![
        ("log_scan", log),
        ("batch_deep", batches()),
        ("index_check", index_inputs()),
        ("text_files", text_inputs()),
        ("verify_dir", verify_inputs()),
        ("bucket", bucket_inputs()),
        ("direct_frames", crate::direct::seeds()),
        ("direct_session", crate::session::seeds()),
        ("endpoint_requests", crate::endpoint::seeds()),
    ]
}
