//! The long-polling `Fetch` high-watermark source (`segmirror ship --source-bootstrap`, the default there) against
//! a real Kafka 4.4 broker.
//!
//! [`fetch_follows_the_real_high_watermark_as_it_moves_never_above_it_and_survives_a_broker_restart`]: records are
//! produced (acks=all) to two partitions; the source's answer for each must equal the broker's own high watermark
//! (`GetOffsetShell --time -1`) once seen, learned by the fetch the broker holds (not by `ListOffsets` polling:
//! [`FetchHighWatermarks::learning`] and the answer counts say which). Then a producer writes batch after batch
//! while the source is sampled: it must never be above the records sent so far (the broker's high watermark can
//! not be), and each acknowledged batch must be seen promptly (by a parked fetch: well under the fetch's own
//! maximum wait). A partition that does not exist stays unknown. Then the broker is stopped: the source reports
//! the failure and keeps its last values; restarted, it follows new records again, back on the long poll.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use segmirror_shipper::source::{FetchHighWatermarks, FetchHwConfig, HighWatermarkLearning, HighWatermarkSource};
use segmirror_tests::wait::wait_for;
use segmirror_tests::*;

const TOPIC: &str = "hw-fetch";
/// Longest wait for the source to see a high watermark or a failure (the machine may be busy).
const SEE_TIMEOUT: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(5);

fn produce(broker: &KafkaBroker, partition: i32, n: usize, tag: &str) {
    let values: Vec<String> = (0..n).map(|i| format!("{tag}-{partition}-{i}")).collect();
    let records: Vec<(Option<&str>, Option<&str>)> = values.iter().map(|v| (None, Some(v.as_str()))).collect();
    kcat_produce(&broker.bootstrap(), TOPIC, partition, &records, &[]).unwrap();
}

/// Wait until the source answers the broker's high watermark for every partition, never above it on the way.
fn wait_until_seen(source: &FetchHighWatermarks, broker_hw: &std::collections::BTreeMap<i32, i64>) {
    for (&p, &hw) in broker_hw {
        wait_for(
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
        )
        .unwrap();
    }
}

#[test]
fn fetch_follows_the_real_high_watermark_as_it_moves_never_above_it_and_survives_a_broker_restart() {
    let mut broker = KafkaBroker::start(BrokerConfig::new("fetch-hw")).unwrap();
    let tools = broker.tools();
    tools.create_topic(&TopicSpec::new(TOPIC, 2)).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let source = Arc::new(FetchHighWatermarks::spawn(
        runtime.handle(),
        broker.bootstrap(),
        vec![(TOPIC.to_string(), 0), (TOPIC.to_string(), 1)],
        FetchHwConfig::default(),
    ));

    produce(&broker, 0, 120, "a");
    produce(&broker, 1, 45, "a");
    let broker_hw = tools.end_offsets(TOPIC).unwrap();
    assert_eq!(broker_hw.get(&0), Some(&120));
    assert_eq!(broker_hw.get(&1), Some(&45));
    wait_until_seen(&source, &broker_hw);
    wait_for("the long poll", SEE_TIMEOUT, POLL, || {
        Ok((source.learning() == HighWatermarkLearning::LongPoll).then_some(()))
    })
    .unwrap();
    assert_eq!(source.last_error(), None);

    // A producer writes batch after batch to partition 0; a sampler checks the bound against the records sent.
    let sent = Arc::new(AtomicI64::new(120));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (source, sent, stop) = (source.clone(), sent.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut samples = 0u64;
            while !stop.load(Ordering::SeqCst) {
                // Read the bound before the count: a count read after can only be larger.
                let hw = source.high_watermark(TOPIC, 0).map_or(0, |h| h.offset);
                let sent = sent.load(Ordering::SeqCst);
                assert!(hw <= sent, "bound {hw} above the {sent} records sent");
                samples += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
            samples
        })
    };
    let (fetches, lists) = (source.fetch_answers(), source.list_answers());
    let mut delays = Vec::new();
    for round in 0..20 {
        sent.fetch_add(10, Ordering::SeqCst);
        produce(&broker, 0, 10, &format!("b{round}"));
        // Acknowledged (acks=all): the high watermark is past these records now.
        let want = 130 + 10 * round;
        let acked = Instant::now();
        wait_for(
            &format!("{TOPIC}-0 at {want}"),
            SEE_TIMEOUT,
            Duration::from_micros(200),
            || Ok((source.high_watermark(TOPIC, 0).map(|h| h.offset) == Some(want)).then_some(())),
        )
        .unwrap();
        delays.push(acked.elapsed());
    }
    stop.store(true, Ordering::SeqCst);
    let samples = sampler.join().unwrap();
    assert!(samples > 20, "{samples} samples");
    delays.sort();
    let median = delays[delays.len() / 2];
    eprintln!(
        "acknowledged to seen: median {median:?}, max {:?}",
        delays.last().unwrap()
    );
    // Learned by the parked fetch: answered as each batch committed, never by ListOffsets polling meanwhile.
    assert!(
        source.fetch_answers() >= fetches + 20,
        "{} fetch answers",
        source.fetch_answers() - fetches
    );
    assert_eq!(source.list_answers(), lists, "no ListOffsets while the long poll runs");
    assert_eq!(source.learning(), HighWatermarkLearning::LongPoll);
    assert!(
        median < Duration::from_millis(250),
        "median {median:?}: half the fetch's maximum wait or more"
    );
    assert_eq!(tools.end_offsets(TOPIC).unwrap().get(&0), Some(&320));

    // A partition the broker does not have: no bound, never a guess.
    assert_eq!(source.high_watermark(TOPIC, 7), None);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(source.high_watermark(TOPIC, 7), None);

    // The broker goes away: the failure is reported, the last values stay in force.
    broker.stop().unwrap();
    let error = wait_for("the source to notice the broker is gone", SEE_TIMEOUT, POLL, || {
        Ok(source.last_error())
    })
    .unwrap();
    assert!(error.contains(&broker.bootstrap()), "{error}");
    assert_eq!(source.high_watermark(TOPIC, 0).map(|h| h.offset), Some(320));
    assert_eq!(source.high_watermark(TOPIC, 1).map(|h| h.offset), Some(45));

    // Back: the same source follows new records, on the long poll again.
    broker.restart().unwrap();
    produce(&broker, 1, 30, "c");
    let broker_hw = tools.end_offsets(TOPIC).unwrap();
    assert_eq!(broker_hw.get(&1), Some(&75));
    wait_until_seen(&source, &broker_hw);
    let fetches = source.fetch_answers();
    wait_for("the long poll after the restart", SEE_TIMEOUT, POLL, || {
        Ok((source.learning() == HighWatermarkLearning::LongPoll && source.fetch_answers() > fetches).then_some(()))
    })
    .unwrap();
    assert_eq!(source.last_error(), None);
    assert_eq!(source.high_watermark(TOPIC, 7), None);
    drop(source);
    broker.stop().unwrap();
}
