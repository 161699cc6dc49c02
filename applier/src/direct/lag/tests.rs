use super::*;
use crate::direct::{ClaimRecord, RecordedProgress, RecordedShipped};
use crate::mirror::{claim_file, progress_file, state_file};

fn write(path: std::path::PathBuf, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

fn no_links() -> Status {
    Status {
        schema_version: 1,
        generated_at_ms: 0,
        links: Vec::new(),
    }
}

#[test]
fn the_lag_is_read_from_the_state_progress_and_claim_records() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // The mirror holds segment 100 durable to byte 500, its next offset 140.
    write(
        state_file(root, "orders-3"),
        br#"{"topic":"orders","partition":3,"topic_id":[7,7,7,7,7,7,7,7,7,7,7,7,7,7,7,7],
            "segment_base":100,"position":500,"sealed":false,"next_offset":140}"#,
    );
    // The source ends at 150 in the same segment (800 bytes); it first held 145 at 4 s.
    let progress = RecordedProgress {
        topic: "orders".into(),
        partition: 3,
        log_end_offset: 150,
        high_watermark: Some(149),
        active_segment_base: 100,
        active_segment_size: 800,
        shipper_time_ms: 9_000,
        received_at_ms: 10_000,
        points: vec![(145, 4_000), (150, 6_000)],
        shipped: Some(RecordedShipped {
            segment_base: 100,
            position: 450,
            end_offset: 130,
        }),
        above_high_watermark: false,
    };
    write(progress_file(root, "orders-3"), &serde_json::to_vec(&progress).unwrap());
    let claim = ClaimRecord {
        topic: "orders".into(),
        partition: 3,
        node: 2,
        epoch: 7,
    };
    write(claim_file(root, "orders-3"), &serde_json::to_vec(&claim).unwrap());
    // Only a claim: nothing reported yet, so no lag either.
    let other = ClaimRecord {
        partition: 4,
        ..claim.clone()
    };
    write(claim_file(root, "orders-4"), &serde_json::to_vec(&other).unwrap());

    let lags = tail_lags(root, &no_links(), 20_000);
    assert_eq!(lags.len(), 2, "{lags:?}");
    let l = &lags[0];
    assert_eq!((l.topic.as_str(), l.partition), ("orders", 3));
    assert_eq!(l.installed_end_offset, Some(140));
    assert_eq!(l.source_log_end_offset, Some(150));
    assert_eq!(l.source_high_watermark, Some(149));
    assert_eq!(l.source_seen_at_ms, Some(10_000));
    assert_eq!(l.lag_offsets, Some(10));
    assert_eq!(l.lag_bytes, Some(300), "same segment: 800 - 500 bytes");
    assert_eq!(
        l.lag_seconds,
        Some(16),
        "behind since the first point beyond 140, at 4 s"
    );
    assert_eq!(l.shipped_end_offset, Some(140), "never less than installed");
    assert_eq!((l.claim_node, l.claim_epoch), (Some(2), Some(7)));
    assert_eq!((&l.lag_unknown, &l.problem), (&None, &None));
    let o = &lags[1];
    assert_eq!((o.partition, o.claim_node), (4, Some(2)));
    assert_eq!(
        (o.source_log_end_offset, o.lag_offsets, o.lag_seconds),
        (None, None, None)
    );
}

#[test]
fn an_unreadable_record_is_named_and_the_rest_still_shown() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(progress_file(root, "orders-0"), b"{ not json");
    write(
        claim_file(root, "orders-0"),
        br#"{"topic":"orders","partition":0,"node":1,"epoch":3}"#,
    );
    let lags = tail_lags(root, &no_links(), 0);
    assert_eq!(lags.len(), 1);
    let problem = lags[0].problem.as_deref().unwrap_or_default();
    assert!(problem.contains("progress"), "{problem}");
    assert_eq!(lags[0].claim_node, Some(1));
    assert_eq!(lags[0].source_log_end_offset, None);
}
