//! The chunk rules of `segmirror.manifest.v2`: what a valid chunk list is, and every hostile one refused naming the
//! chunk's key and field.

use segment_format::dir::SegmentFileKind;
use segment_format::partition_metadata::Uuid;

use crate::manifest::*;

fn tid() -> Uuid {
    Uuid([7; 16])
}

fn pk(prefix: &str) -> PartitionKey {
    PartitionKey::new(KeyPrefix::new(prefix).unwrap(), "east", "orders", 0).unwrap()
}

fn chunk(p: &PartitionKey, from: u64, to: u64, next_offset: i64) -> LogChunk {
    LogChunk {
        from,
        to,
        next_offset,
        key: p.chunk_key(&tid(), SegmentRange::new(100, next_offset).unwrap(), from),
        crc32c: 1,
        sha256: Sha256Digest([1; 32]),
    }
}

/// An unsealed v2 version `[100, 300)` of 3000 bytes in three chunks, the first the `.log` of a v1 version.
fn chunked(prefix: &str) -> Manifest {
    let p = pk(prefix);
    let range = SegmentRange::new(100, 300).unwrap();
    let file = |kind, size| {
        let name = SegmentFileName::new(100, kind);
        ManifestFile {
            name,
            key: p.data_key(&tid(), range, name).unwrap(),
            size,
            crc32c: 2,
            sha256: Sha256Digest([2; 32]),
            mtime_ms: 1,
        }
    };
    let mut first = chunk(&p, 0, 1000, 150);
    first.key = p
        .data_key(
            &tid(),
            SegmentRange::new(100, 150).unwrap(),
            SegmentFileName::new(100, SegmentFileKind::Log),
        )
        .unwrap();
    Manifest {
        format: MANIFEST_FORMAT_V2.into(),
        link: "east".into(),
        topic: "orders".into(),
        partition: 0,
        source_topic_id: tid(),
        source_cluster_id: "cluster".into(),
        base_offset: 100,
        first_offset: Some(100),
        last_offset: Some(299),
        next_offset: 300,
        batches: 20,
        records: 200,
        max_timestamp: 5,
        sealed: false,
        epochs: vec![],
        log_start_offset: 0,
        files: vec![
            file(SegmentFileKind::Log, 3000),
            file(SegmentFileKind::Index, 16),
            file(SegmentFileKind::TimeIndex, 24),
        ],
        end_snapshot: None,
        log_chunks: vec![first, chunk(&p, 1000, 2000, 220), chunk(&p, 2000, 3000, 300)],
        shipper: ShipperStamp {
            id: "s".into(),
            lease_epoch: 1,
        },
        created_at_ms: 1,
    }
}

/// A change made to a valid manifest.
type Edit = Box<dyn Fn(&mut Manifest)>;

fn refused(m: &Manifest) -> String {
    match m.validate() {
        Err(problem) => problem.to_string(),
        Ok(()) => panic!("accepted: {:#?}", m.log_chunks),
    }
}

#[test]
fn a_chunked_manifest_round_trips_and_is_where_it_claims() {
    for prefix in ["", "backups/kafka"] {
        let m = chunked(prefix);
        m.validate().unwrap();
        let key = pk(prefix).manifest_key(&tid(), 100).unwrap();
        let parsed = Manifest::from_json(&key, &m.to_json()).unwrap();
        assert_eq!(parsed, m);
        parsed.check_location(&KeyPrefix::new(prefix).unwrap(), &key).unwrap();
        // Under another prefix, the chunk keys betray it.
        let elsewhere = if prefix.is_empty() { "x" } else { "" };
        assert!(parsed
            .check_location(
                &KeyPrefix::new(elsewhere).unwrap(),
                &pk(elsewhere).manifest_key(&tid(), 100).unwrap()
            )
            .is_err());
        // Objects: the chunks instead of the `.log` entry.
        let keys: Vec<String> = m.objects().into_iter().map(|f| f.key).collect();
        assert_eq!(keys.len(), 2 + 3);
        assert!(!keys.contains(&m.files[0].key));
        assert!(m.log_chunks.iter().all(|c| keys.contains(&c.key)));
    }
}

#[test]
fn chunk_keys_parse_as_chunk_objects_of_their_lineage() {
    let p = pk("pre");
    let range = SegmentRange::new(100, 220).unwrap();
    let key = p.chunk_key(&tid(), range, 1000);
    assert!(
        key.ends_with("/data/00000000000000000100/00000000000000000220/00000000000000001000.logchunk"),
        "{key}"
    );
    let parsed = ObjectKey::parse(&KeyPrefix::new("pre").unwrap(), &key).unwrap();
    assert_eq!(
        parsed.kind,
        ObjectKind::Chunk {
            topic_id: tid(),
            range,
            from: 1000
        }
    );
    assert_eq!(parsed.to_key(), key);
    for bad in [
        "1000.logchunk",
        "-0000000000000001000.logchunk",
        "0000000000000000100a.logchunk",
    ] {
        let key = format!("{}/{bad}", p.data_dir(&tid(), range));
        assert!(
            ObjectKey::parse(&KeyPrefix::new("pre").unwrap(), &key).is_err(),
            "{key}"
        );
    }
}

#[test]
fn hostile_chunk_lists_are_refused_naming_the_chunk_and_field() {
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "overlap",
            Box::new(|m| m.log_chunks[1].from = 900),
            "field from is byte 900, expected 1000",
        ),
        (
            "out of order",
            Box::new(|m| m.log_chunks.swap(1, 2)),
            "field from is byte 2000, expected 1000",
        ),
        (
            "gap",
            Box::new(|m| m.log_chunks[2].from = 2100),
            "field from is byte 2100",
        ),
        (
            "empty range",
            Box::new(|m| m.log_chunks[2].to = 2000),
            "field to 2000 is not above from 2000",
        ),
        (
            "short of the .log",
            Box::new(|m| m.files[0].size = 3500),
            "log_chunks end at byte 3000, the .log is 3500 bytes",
        ),
        (
            "offsets going back",
            Box::new(|m| m.log_chunks[1].next_offset = 140),
            "field next_offset 140 must be above 150",
        ),
        (
            "offsets past the version",
            Box::new(|m| m.log_chunks[2].next_offset = 301),
            "field next_offset 301",
        ),
        (
            "a key of another range",
            Box::new(|m| m.log_chunks[1].key = pk("").chunk_key(&tid(), SegmentRange::new(100, 221).unwrap(), 1000)),
            "field key is not its chunk key",
        ),
        (
            "a whole-.log key for a later chunk",
            Box::new(|m| m.log_chunks[1].key = m.log_chunks[0].key.clone()),
            "field key is not its chunk key",
        ),
        (
            "chunks in a v1 manifest",
            Box::new(|m| m.format = MANIFEST_FORMAT_V1.into()),
            "chunks need segmirror.manifest.v2",
        ),
        (
            "no chunks for a non-empty .log",
            Box::new(|m| m.log_chunks.clear()),
            "log_chunks: none, for a .log of 3000 bytes",
        ),
        (
            "unsealed, ending before its next offset",
            Box::new(|m| m.log_chunks[2] = chunk(&pk(""), 2000, 3000, 290)),
            "log_chunks end at offset 290",
        ),
    ];
    for (what, edit, expected) in cases {
        let mut m = chunked("");
        edit(&mut m);
        let message = refused(&m);
        assert!(message.contains(expected), "{what}: {message}");
    }
}

#[test]
fn a_chunk_list_is_bounded_and_a_full_one_fits_the_document_cap() {
    // The longest legal link and topic names make the longest keys.
    let (link, topic) = ("l".repeat(MAX_LINK_LENGTH), "t".repeat(249));
    let p = PartitionKey::new(KeyPrefix::root(), &link, &topic, i32::MAX).unwrap();
    let build = |n: u64| {
        let mut m = chunked("");
        (m.link, m.topic, m.partition) = (link.clone(), topic.clone(), i32::MAX);
        m.next_offset = 100 + n as i64;
        m.last_offset = Some(m.next_offset - 1);
        let range = SegmentRange::new(100, m.next_offset).unwrap();
        for f in &mut m.files {
            f.key = p.data_key(&tid(), range, f.name).unwrap();
        }
        m.files[0].size = n;
        m.log_chunks = (0..n).map(|i| chunk(&p, i, i + 1, 101 + i as i64)).collect();
        m
    };
    let over = build(MAX_LOG_CHUNKS as u64 + 1);
    assert!(refused(&over).contains("exceed the limit"), "{}", refused(&over));
    let full = build(MAX_LOG_CHUNKS as u64);
    full.validate().unwrap();
    let json = full.to_json();
    assert!((json.len() as u64) < MAX_MANIFEST_BYTES, "{} bytes", json.len());
    Manifest::from_json(&p.manifest_key(&tid(), 100).unwrap(), &json).unwrap();
}

#[test]
fn an_old_reader_format_is_still_read_and_an_unknown_one_refused_by_name() {
    let key = pk("").manifest_key(&tid(), 100).unwrap();
    let mut m = chunked("");
    m.format = "segmirror.manifest.v3".into();
    let err = Manifest::from_json(&key, &m.to_json()).unwrap_err().to_string();
    assert!(err.contains("unsupported format 'segmirror.manifest.v3'"), "{err}");
}
