//! A real `segmirror ship --connect` against an applier whose Resume names a position the shipper cannot prove: a
//! Kafka 4.4 broker with one topic of two partitions, and a hand-written applier (the transport's handshake and
//! frames) that resumes `orders-0` at a segment the source never had. The shipper refuses that partition for the
//! session, saying why, ships `orders-1` as usual (acknowledged by the hostile applier), sends nothing of `orders-0`,
//! and keeps running (it used to exit, so a peer's bad value stopped the whole link).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use segment_format::partition_metadata::PartitionMetadata;
use segmirror_tests::service::{wait_until, Service};
use segmirror_tests::*;
use segmirror_transport::direct::handshake::FEATURE_MIRROR_LAYOUT;
use segmirror_transport::direct::payload::MirrorLayout;
use segmirror_transport::direct::session::BoxIo;
use segmirror_transport::direct::{handshake, Frame, HandshakeConfig, PartitionRef, Position, Role};

const PATIENCE: Duration = Duration::from_secs(90);

/// Bytes of chunks received per partition name.
type Received = Arc<Mutex<BTreeMap<String, u64>>>;

/// The hostile applier: for every connection, a handshake, then a Resume of `resume` only, an empty layout for it
/// when agreed, a large credit, and an Ack for every chunk and seal (heartbeats every 500 ms), recording the bytes
/// per partition.
async fn hostile_applier(listener: tokio::net::TcpListener, resume: Position, received: Received) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else { return };
        let (resume, received) = (resume.clone(), received.clone());
        tokio::spawn(async move {
            let config = HandshakeConfig::new(Role::Applier, "dr", None);
            let Ok((mut framed, session)) = handshake(Box::new(tcp) as BoxIo, &config).await else {
                return;
            };
            let partition = resume.partition.clone();
            if framed.send(Frame::Resume(vec![resume])).await.is_err() {
                return;
            }
            if session.features & FEATURE_MIRROR_LAYOUT != 0 {
                let layout = MirrorLayout {
                    partition,
                    last: true,
                    segments: Vec::new(),
                };
                let _ = framed.send(Frame::MirrorLayout(layout)).await;
            }
            let _ = framed.send(Frame::Credit { bytes: 64 << 20 }).await;
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            let mut sequence = 0;
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        sequence += 1;
                        if framed.send(Frame::Heartbeat { sequence }).await.is_err() {
                            return;
                        }
                    }
                    frame = framed.next() => {
                        let ack = match frame {
                            Some(Ok(Frame::Chunk(c))) => {
                                let name = format!("{}-{}", c.partition.topic, c.partition.partition);
                                *received.lock().unwrap().entry(name).or_default() += c.bytes.len() as u64;
                                Some(Position {
                                    partition: c.partition.clone(),
                                    segment_base: c.segment_base,
                                    position: c.position + c.bytes.len() as u64,
                                })
                            }
                            Some(Ok(Frame::SegmentSeal(s))) => Some(Position {
                                partition: s.partition.clone(),
                                segment_base: s.segment_base,
                                position: s.final_size,
                            }),
                            Some(Ok(_)) => None,
                            _ => return,
                        };
                        if let Some(ack) = ack {
                            if framed.send(Frame::Ack(ack)).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        });
    }
}

#[test]
fn a_resume_at_a_segment_the_source_never_had_refuses_that_partition_and_the_shipper_goes_on() {
    let broker = KafkaBroker::start(BrokerConfig::new("e2e-hostile-resume")).unwrap();
    let bootstrap = broker.bootstrap();
    admin(
        &bootstrap,
        &[TopicSpec::new("orders", 2).config("retention.ms", -1)],
        &[],
    )
    .unwrap();
    for partition in 0..2 {
        let records = (0..100)
            .map(|i| OutRecord {
                partition: Some(partition),
                key: Some(format!("k-{i}").into_bytes()),
                value: Some(vec![b'a' + (i % 26) as u8; 200]),
                headers: Vec::new(),
                timestamp: None,
            })
            .collect();
        python_produce(&bootstrap, &ProducePlan::new("orders").step(ProduceStep::Send(records))).unwrap();
    }
    let metadata = PartitionMetadata::read(&broker.partition_dir("orders", 0).join("partition.metadata")).unwrap();
    let resume = Position {
        partition: PartitionRef {
            topic: "orders".into(),
            partition: 0,
            topic_id: metadata.topic_id.0,
        },
        segment_base: 1_000_000,
        position: 0,
    };

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let received: Received = Arc::default();
    runtime.spawn(hostile_applier(listener, resume, received.clone()));

    let log_dir = broker.log_dir().to_str().unwrap().to_string();
    let mut shipper = Service::start(
        "ship",
        [
            "ship",
            "--connect",
            &addr,
            "--plaintext",
            "--link",
            "dr",
            "--upto",
            "log-end",
            "--log-dir",
            &log_dir,
        ],
    )
    .patience(PATIENCE);
    let other = std::fs::metadata(broker.partition_dir("orders", 1).join("00000000000000000000.log"))
        .unwrap()
        .len();
    wait_until("orders-1 shipped whole", PATIENCE, &mut [&mut shipper], || {
        let got = received.lock().unwrap().get("orders-1").copied().unwrap_or(0);
        (got >= other, got)
    });
    // A while longer: still nothing of orders-0, and the shipper runs.
    std::thread::sleep(Duration::from_secs(2));
    shipper.assert_running();
    assert_eq!(
        received.lock().unwrap().get("orders-0"),
        None,
        "the refused partition was shipped"
    );
    let log = shipper.log();
    assert!(
        log.contains("refusing the applier's Resume position") && log.contains("orders-0") && log.contains("1000000"),
        "{log}"
    );
    let (code, log) = shipper.stop();
    assert_eq!(code, Some(0), "{log}");
}
