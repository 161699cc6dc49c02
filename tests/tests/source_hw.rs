//! The high watermarks `segmirror ship --source-bootstrap` learns from the source broker (a long-polling Fetch,
//! `ListOffsets` to learn a partition first) against a real Kafka 4.4 broker.
//!
//! [`the_broker_source_follows_the_real_high_watermark_ahead_of_the_checkpoint_and_survives_a_broker_restart`]: records
//! are produced (acks=all) to two partitions; the source's answer for each is compared with the broker's own high
//! watermark (`GetOffsetShell --time -1`, the tool behind `kafka-get-offsets.sh`): equal once the source has asked
//! again, never above it. The broker checkpoints high watermarks only every
//! [`CHECKPOINT_INTERVAL_MS`]: the `replication-offset-checkpoint` source still knows nothing (or less) at that
//! moment, so the bound learned from the broker is ahead of it. A partition that does not exist stays unknown
//! (nothing of it would ship). Then the broker is stopped: the source reports the failure and keeps its last values; the
//! broker restarted, more records produced, the source follows again without being rebuilt.

use std::time::Duration;

use segmirror_shipper::source::{CheckpointHighWatermarks, FetchHighWatermarks, FetchHwConfig, HighWatermarkSource};
use segmirror_tests::wait::wait_for;
use segmirror_tests::*;

const TOPIC: &str = "hw-source";
/// The broker's `replica.high.watermark.checkpoint.interval.ms` here: long, so that the checkpoint certainly lags
/// (with Kafka's default 5 s it lags by up to 5 s; how much at a given moment is chance).
const CHECKPOINT_INTERVAL_MS: u64 = 600_000;
/// Longest wait for the source to see a high watermark or a failure (it asks every 50 ms; the machine may be busy).
const SEE_TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(20);

fn produce(broker: &KafkaBroker, partition: i32, n: usize, tag: &str) {
    let values: Vec<String> = (0..n).map(|i| format!("{tag}-{partition}-{i}")).collect();
    let records: Vec<(Option<&str>, Option<&str>)> = values.iter().map(|v| (None, Some(v.as_str()))).collect();
    kcat_produce(&broker.bootstrap(), TOPIC, partition, &records, &[]).unwrap();
}

/// Wait until the source answers `expected` for every partition, checking on the way that it never runs ahead of
/// the broker's own high watermark.
fn wait_until_seen(source: &FetchHighWatermarks, broker_hw: &std::collections::BTreeMap<i32, i64>) {
    for (&p, &hw) in broker_hw {
        let seen = wait_for(
            &format!("{TOPIC}-{p} at high watermark {hw}"),
            SEE_TIMEOUT,
            POLL,
            || {
                let got = source.high_watermark(TOPIC, p).map(|h| h.offset);
                assert!(
                    got.is_none_or(|o| o <= hw),
                    "{TOPIC}-{p}: {got:?} above the broker's {hw}"
                );
                Ok((got == Some(hw)).then_some(()))
            },
        );
        seen.unwrap();
    }
}

#[test]
fn the_broker_source_follows_the_real_high_watermark_ahead_of_the_checkpoint_and_survives_a_broker_restart() {
    let mut broker = KafkaBroker::start(
        BrokerConfig::new("source-hw")
            .property("replica.high.watermark.checkpoint.interval.ms", CHECKPOINT_INTERVAL_MS),
    )
    .unwrap();
    let tools = broker.tools();
    tools.create_topic(&TopicSpec::new(TOPIC, 2)).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let asked = vec![(TOPIC.to_string(), 0), (TOPIC.to_string(), 1), (TOPIC.to_string(), 7)];
    let source = FetchHighWatermarks::spawn(runtime.handle(), broker.bootstrap(), asked, FetchHwConfig::default());
    let checkpoint = CheckpointHighWatermarks::new(vec![broker.log_dir().to_path_buf()]);

    produce(&broker, 0, 120, "a");
    produce(&broker, 1, 45, "a");
    let broker_hw = tools.end_offsets(TOPIC).unwrap();
    assert_eq!(broker_hw.get(&0), Some(&120));
    assert_eq!(broker_hw.get(&1), Some(&45));
    wait_until_seen(&source, &broker_hw);
    // The checkpoint has not caught up: its bound is behind (here: not even known yet).
    checkpoint.reload().unwrap();
    for (&p, &hw) in &broker_hw {
        let cp = checkpoint.high_watermark(TOPIC, p).map(|h| h.offset);
        assert!(
            cp.is_none_or(|o| o < hw),
            "{TOPIC}-{p}: checkpoint {cp:?}, from the broker {hw}"
        );
    }
    // A partition the broker does not have answers an error code: no bound, never a guess.
    assert_eq!(source.high_watermark(TOPIC, 7), None);
    assert_eq!(source.last_error(), None);

    // The broker goes away: the failure is reported, the last values stay in force.
    broker.stop().unwrap();
    let error = wait_for("the source to notice the broker is gone", SEE_TIMEOUT, POLL, || {
        Ok(source.last_error())
    })
    .unwrap();
    assert!(error.contains(&broker.bootstrap()), "{error}");
    assert_eq!(source.high_watermark(TOPIC, 0).map(|h| h.offset), Some(120));
    assert_eq!(source.high_watermark(TOPIC, 1).map(|h| h.offset), Some(45));

    // Back: the same source follows new records.
    broker.restart().unwrap();
    produce(&broker, 0, 30, "b");
    let broker_hw = tools.end_offsets(TOPIC).unwrap();
    assert_eq!(broker_hw.get(&0), Some(&150));
    wait_until_seen(&source, &broker_hw);
    assert_eq!(source.last_error(), None);
    assert_eq!(source.high_watermark(TOPIC, 7), None);
    drop(source);
    broker.stop().unwrap();
}
