//! Refusals of the planning step: retention on the target, every reason in one run, and what is never created.
//! Same fixture as the parent module (a writer-made mirror whose record timestamps are in November 2023, and a
//! target whose metadata log says `orders` keeps data forever unless a test says otherwise).

use segment_format::metadata_log::{encode, METADATA_DIR, RESOURCE_BROKER};

use super::*;
use crate::promote::retention::DeleteReason;

/// Timestamps of the fixture's mirror records: this plus the record's offset.
const MIRROR_TS: i64 = 1_700_000_000_000;
const HOUR_MS: i64 = 3_600_000;

fn retention_losses(refusals: &[Refusal]) -> Vec<&RetentionLoss> {
    refusals
        .iter()
        .filter_map(|r| match r {
            Refusal::RetentionWouldDelete(loss) => Some(loss.as_ref()),
            _ => None,
        })
        .collect()
}

/// Appends one batch of metadata records to the target's metadata log.
fn append_metadata(target: &Path, at: i64, values: Vec<Vec<u8>>) {
    let path = target.join(METADATA_DIR).join("00000000000000000000.log");
    let mut batch = BatchBuilder::new(at);
    for (i, v) in values.into_iter().enumerate() {
        batch = batch.record(RecordSpec::new(i as i32, 1).with_value(v));
    }
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&batch.build());
    std::fs::write(&path, bytes).unwrap();
}

fn set_orders_config(target: &Path, at: i64, key: &str, value: Option<&str>) {
    append_metadata(
        target,
        at,
        vec![encode::config_record(
            segment_format::metadata_log::RESOURCE_TOPIC,
            TOPIC,
            key,
            value,
        )],
    );
}

#[test]
fn retention_that_would_delete_promoted_data_is_refused_with_timestamps_then_reported_when_allowed() {
    let mut f = fixture();
    // The fixture's log holds offsets 0..=4 (5 records); the config below is offset 5.
    set_orders_config(&f.target, 5, "retention.ms", Some(&HOUR_MS.to_string()));
    let before = target_state(&f.target);
    let got = refusals(f.promote().unwrap_err());
    let losses = retention_losses(&got);
    assert_eq!((got.len(), losses.len()), (2, 2), "{got:#?}");
    for (loss, (w, log_start)) in losses.iter().zip(f.written.iter().zip([0, TRIMMED_START])) {
        assert_eq!(loss.partition, TopicPartition::new(TOPIC, w.partition));
        assert_eq!(loss.retention.retention_ms, Some(HOUR_MS));
        assert_eq!(loss.cutoff_ms, Some(loss.now_ms - HOUR_MS));
        // Everything goes: every record is from 2023. The partition whose log start moved loses its kept segments.
        assert_eq!(
            (loss.log_start_offset, loss.first_kept_offset),
            (log_start, w.log_end_offset)
        );
        let kept: Vec<_> = w
            .segments
            .iter()
            .enumerate()
            .filter(|(i, _)| w.segments.get(i + 1).is_none_or(|n| n.base_offset > log_start))
            .map(|(_, s)| s)
            .collect();
        assert_eq!(loss.segments.len(), kept.len());
        for (doomed, s) in loss.segments.iter().zip(&kept) {
            assert_eq!(doomed.base_offset, s.base_offset);
            assert_eq!(doomed.max_timestamp, Some(MIRROR_TS + s.last_offset.unwrap()));
            assert_eq!(doomed.bytes, s.size);
            assert_eq!(doomed.reason, DeleteReason::RetentionMs);
        }
        assert_eq!(loss.oldest_segment_max_timestamp, loss.segments[0].max_timestamp);
        let text = Refusal::RetentionWouldDelete(Box::new((*loss).clone())).to_string();
        let oldest = loss.segments[0].max_timestamp.unwrap().to_string();
        for needle in [
            format!("{TOPIC}-{}", w.partition),
            format!("offsets [{log_start}, {})", w.log_end_offset),
            format!("timestamp {oldest}"),
            format!("now - retention.ms = {}", loss.now_ms - HOUR_MS),
            "retention.ms=3600000 (topic config)".to_string(),
            "--allow-retention-delete".to_string(),
        ] {
            assert!(text.contains(&needle), "{needle:?} in {text}");
        }
    }
    assert_eq!(target_state(&f.target), before, "a refused promotion changes nothing");

    let mut request = f.request();
    request.allow_retention_delete = true;
    let report = promote(&request, &mut f.catalog).unwrap();
    assert_eq!(report.changed(), 2);
    assert_eq!(report.retention_deletes.len(), 2);
    assert_eq!(
        report.retention_deletes[0].first_kept_offset,
        f.written[0].log_end_offset
    );
}

#[test]
fn retention_bytes_deletes_a_prefix_and_compaction_deletes_nothing() {
    let mut f = fixture();
    let w = f.written[0].clone();
    let total: u64 = w.segments.iter().map(|s| s.size).sum();
    // Keep the last two segments: the log may shrink to exactly this.
    let keep: u64 = w.segments.iter().rev().take(2).map(|s| s.size).sum();
    set_orders_config(&f.target, 5, "retention.bytes", Some(&keep.to_string()));
    let got = refusals(f.promote().unwrap_err());
    let losses = retention_losses(&got);
    let p0 = losses.iter().find(|l| l.partition.partition == 0).unwrap();
    assert_eq!(p0.log_bytes, total);
    assert_eq!(p0.segments.len(), w.segments.len() - 2);
    assert!(p0.segments.iter().all(|s| s.reason == DeleteReason::RetentionBytes));
    assert_eq!(p0.first_kept_offset, w.segments[w.segments.len() - 2].base_offset);
    assert!(
        got.iter().all(|r| r.to_string().contains("exceeds retention.bytes")),
        "{got:#?}"
    );

    // A compact-only topic deletes nothing by size or age.
    set_orders_config(&f.target, 6, "cleanup.policy", Some("compact"));
    set_orders_config(&f.target, 7, "retention.ms", Some("1"));
    assert_eq!(f.promote().unwrap().changed(), 2);
}

#[test]
fn broker_defaults_apply_in_kafka_order() {
    let mut f = fixture();
    // Without a topic override Kafka's default (168 hours) applies, and the 2023 data is older.
    set_orders_config(&f.target, 5, "retention.ms", None);
    let got = refusals(f.promote().unwrap_err());
    assert_eq!(retention_losses(&got).len(), 2, "{got:#?}");
    assert!(
        got[0].to_string().contains("log.retention.hours=168 (Kafka's default)"),
        "{}",
        got[0]
    );

    // server.properties: log.retention.ms beats log.retention.hours.
    let props = f.target.parent().unwrap().join("server.properties");
    std::fs::write(&props, "log.retention.hours=1\nlog.retention.ms=-1\n").unwrap();
    let mut request = f.request();
    request.target_config = Some(props.clone());
    let mut staged = f.catalog.partitions(LINK).unwrap();
    staged.sort_by_key(|p| p.key.partition);
    // Planning only (the promotion itself is the parent module's business): a dynamic cluster-wide default beats
    // server.properties, and this broker's own dynamic config beats the cluster-wide one.
    let mut refused = Vec::new();
    let planned = plan(&request, &f.catalog, &staged, &staged, true, &mut refused).unwrap();
    assert!(refused.is_empty() && planned.planned.len() == 2, "{refused:#?}");
    append_metadata(
        &f.target,
        6,
        vec![encode::config_record(
            RESOURCE_BROKER,
            "",
            "log.retention.ms",
            Some("3600000"),
        )],
    );
    let mut refused = Vec::new();
    plan(&request, &f.catalog, &staged, &staged, true, &mut refused).unwrap();
    assert_eq!(retention_losses(&refused).len(), 2);
    assert!(
        refused[0].to_string().contains("(dynamic cluster-wide default)"),
        "{}",
        refused[0]
    );
    append_metadata(
        &f.target,
        7,
        vec![encode::config_record(
            RESOURCE_BROKER,
            "1",
            "log.retention.ms",
            Some("-1"),
        )],
    );
    let mut refused = Vec::new();
    plan(&request, &f.catalog, &staged, &staged, true, &mut refused).unwrap();
    assert!(refused.is_empty(), "{refused:#?}");

    // A --target-config that cannot be read is refused, not guessed around.
    let unreadable = f.target.join("no-such.properties");
    request.target_config = Some(unreadable.clone());
    assert!(matches!(
        refusals(promote(&request, &mut f.catalog).unwrap_err()).as_slice(),
        [Refusal::TargetConfigUnreadable { path, reason }] if *path == unreadable && reason.contains("no-such")
    ));
}

#[test]
fn unknown_retention_is_refused_unless_allowed_and_topic_ids_must_agree_with_the_metadata_log() {
    let mut f = fixture();
    let metadata = f.target.join(METADATA_DIR);
    std::fs::rename(&metadata, f.target.parent().unwrap().join("moved")).unwrap();
    let got = refusals(f.promote().unwrap_err());
    assert!(
        matches!(got.as_slice(), [Refusal::RetentionUnknown { topic, reason }]
            if topic == TOPIC && reason.contains(METADATA_DIR)),
        "{got:#?}"
    );
    let mut request = f.request();
    request.allow_retention_delete = true;
    let report = promote(&request, &mut f.catalog).unwrap();
    assert_eq!(report.changed(), 2);
    assert!(
        report.notes.iter().any(|n| n.contains("retention not checked")),
        "{:?}",
        report.notes
    );

    // The topic was recreated on the target while the broker was down: its directories carry the old id.
    let mut f = fixture();
    append_metadata(
        &f.target,
        5,
        vec![
            encode::remove_topic_record(TARGET_ID),
            encode::topic_record(TOPIC, Uuid([9; 16])),
            encode::partition_record(0, Uuid([9; 16])),
            encode::partition_record(1, Uuid([9; 16])),
        ],
    );
    let got = refusals(f.promote().unwrap_err());
    // The recreated topic has no retention override: the default refuses the 2023 data too.
    assert!(
        got.contains(&Refusal::TargetTopicIdDisagrees {
            topic: TOPIC.into(),
            metadata_log: f.target.join(METADATA_DIR),
            metadata_topic_id: Some(Uuid([9; 16]).to_string()),
            partition_topic_id: TARGET_ID.to_string(),
        }),
        "{got:#?}"
    );
}

#[test]
fn every_reason_of_every_partition_is_reported_in_one_run() {
    let mut f = fixture();
    set_orders_config(&f.target, 5, "retention.ms", Some(&HOUR_MS.to_string()));
    // Partition 0: the target holds data, and retention would delete the promoted data.
    let data = f.target.join("orders-0/00000000000000000000.log");
    std::fs::write(&data, b"not empty").unwrap();
    // Partition 1: a leftover of an interrupted apply in the mirror.
    let leftover = f.mirror.join("orders-1/00000000000000000000.index.tmp");
    std::fs::write(&leftover, b"").unwrap();
    // And the broker is running.
    let lock = f.target.join(LOCK_FILE);
    let script = format!(
        "import fcntl,sys\nf=open({lock:?},'a')\nfcntl.lockf(f, fcntl.LOCK_EX)\nprint('locked', flush=True)\nsys.stdin.read()\n"
    );
    let mut child = Command::new("python3")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.take().unwrap()), &mut line).unwrap();
    assert_eq!(line.trim(), "locked");
    let before = target_state(&f.target);
    let got = refusals(f.promote().unwrap_err());
    drop(child.stdin.take());
    child.wait().unwrap();
    assert_eq!(got.len(), 4, "{got:#?}");
    assert!(got.contains(&Refusal::BrokerRunning { lock_file: lock }));
    assert!(got.contains(&Refusal::TargetNotEmpty {
        partition: TopicPartition::new(TOPIC, 0),
        log: data,
        size: 9
    }));
    assert!(got.contains(&Refusal::MirrorUnexpectedFile {
        partition: TopicPartition::new(TOPIC, 1),
        path: leftover
    }));
    assert_eq!(retention_losses(&got)[0].partition, TopicPartition::new(TOPIC, 0));
    assert_eq!(target_state(&f.target), before);
    assert_eq!(f.state(0), PartitionState::Mirroring);
}

#[test]
fn a_missing_mirror_an_unknown_link_and_a_non_log_dir_are_refused_together_and_nothing_is_created() {
    let mut f = fixture();
    let missing = f.mirror.with_file_name("no-such-mirror");
    let not_a_log_dir = f.mirror.with_file_name("no-such-log-dir");
    let request = PromoteRequest {
        mirror_root: missing.clone(),
        log_dir: not_a_log_dir.clone(),
        link: Some("typo".into()),
        ..PromoteRequest::default()
    };
    let links_before = f.catalog.links().unwrap();
    let got = refusals(promote(&request, &mut f.catalog).unwrap_err());
    assert_eq!(
        got,
        vec![
            Refusal::NotALogDir {
                log_dir: not_a_log_dir.clone()
            },
            Refusal::MirrorRootMissing { path: missing.clone() },
            Refusal::UnknownLink {
                link: "typo".into(),
                links: vec![LINK.into()]
            },
        ]
    );
    assert!(!missing.exists() && !not_a_log_dir.exists());
    assert_eq!(f.catalog.links().unwrap(), links_before, "no link is created");

    // With a real target, a missing mirror still refuses (once, not once per partition).
    let request = PromoteRequest {
        mirror_root: missing.clone(),
        log_dir: f.target.clone(),
        ..PromoteRequest::default()
    };
    let before = target_state(&f.target);
    assert_eq!(
        refusals(promote(&request, &mut f.catalog).unwrap_err()),
        vec![Refusal::MirrorRootMissing { path: missing.clone() }]
    );
    assert!(!missing.exists());
    assert_eq!(target_state(&f.target), before);
}
