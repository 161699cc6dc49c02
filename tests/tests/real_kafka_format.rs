use segment_format::verify::{verify_paths, NoProgress, VerifyOptions};
use segmirror_tests::*;

#[test]
fn explore_live() {
    let broker = KafkaBroker::start(BrokerConfig::new("explore-live")).unwrap();
    let bootstrap = broker.bootstrap();
    admin(&bootstrap, &[TopicSpec::new("live", 1).config("internal.segment.bytes", 16384)], &[]).unwrap();
    let dir = broker.partition_dir("live", 0);
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
            let recs: Vec<OutRecord> = (0..20000).map(|i| OutRecord { partition: Some(0), key: Some(format!("k{i}").into_bytes()), value: Some(vec![b'x'; 200]), headers: vec![], timestamp: Some(now + i) }).collect();
            let plan = ProducePlan::new("live").config("linger.ms", 0).config("batch.size", 2000).config("acks", 1).step(ProduceStep::Send(recs));
            python_produce(&bootstrap, &plan).unwrap();
            done.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        let mut runs = 0;
        let mut kinds = std::collections::BTreeMap::<String, usize>::new();
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            let r = verify_paths(&[dir.clone()], &VerifyOptions { deep: true, strict: false }, &NoProgress);
            runs += 1;
            for f in &r.findings {
                let k = format!("{:?} {}", f.severity, f.defect).chars().filter(|c| !c.is_ascii_digit()).collect::<String>();
                let e = kinds.entry(k.clone()).or_default();
                if *e < 3 { eprintln!("FINDING run {runs}: {f}"); }
                *e += 1;
            }
            for e in &r.io_errors { eprintln!("IO {e}"); }
        }
        eprintln!("runs {runs} kinds {kinds:#?}");
    });
}
