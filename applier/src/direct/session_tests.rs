//! The appender behind a real `ApplierSession` over loopback TCP, fed by a shipper whose feed replays a
//! writer-made partition as chunks and seals: the mirror ends with the source's bytes, sealed where it sealed.

use std::time::Duration;

use segmirror_transport::direct::handshake::HandshakeConfig;
use segmirror_transport::direct::payload::{Position, Role, TruncateMode};
use segmirror_transport::direct::session::link::{dial, listen, Acceptor, Dialer, LinkConfig};
use segmirror_transport::direct::session::{ApplierSession, ChunkFeed, FeedItem, SessionConfig, ShipperSession};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::tests::{chunks_of, fixture, mirror_log, seal_of};
use super::*;

/// Bound on the whole exchange: a failure guard only, nothing is asserted about speed.
const GIVE_UP: Duration = Duration::from_secs(60);
/// How often the test looks at the mirror's durable positions.
const POLL: Duration = Duration::from_millis(20);

/// Replays fixed items, from the Resume on.
struct ReplayFeed {
    items: Vec<FeedItem>,
    next: usize,
}

impl ChunkFeed for ReplayFeed {
    async fn seek(&mut self, resume: &[Position]) -> DirectResult<()> {
        self.next = 0;
        if let Some(r) = resume.first() {
            let covered = |item: &FeedItem| match item {
                FeedItem::Chunk(c) => {
                    c.segment_base < r.segment_base
                        || (c.segment_base == r.segment_base && c.position + c.bytes.len() as u64 <= r.position)
                }
                FeedItem::Seal(s) => s.segment_base < r.segment_base,
                // Idempotent: resent from wherever the resume lands.
                FeedItem::LogStart(_) | FeedItem::Replace(_) | FeedItem::Progress(_) | FeedItem::Truncate(_) => true,
                FeedItem::Claim(_) | FeedItem::Roll(_) => unreachable!("not in this feed"),
            };
            self.next = self.items.iter().take_while(|i| covered(i)).count();
        }
        Ok(())
    }

    async fn next(&mut self) -> DirectResult<FeedItem> {
        match self.items.get(self.next).cloned() {
            Some(item) => {
                self.next += 1;
                Ok(item)
            }
            None => std::future::pending().await,
        }
    }
}

fn config() -> SessionConfig {
    SessionConfig {
        heartbeat_interval: Duration::from_millis(100),
        idle_timeout: Duration::from_secs(5),
        credit_window: 4096,
        max_bandwidth: None,
        observer: None,
    }
}

fn link(role: Role) -> LinkConfig {
    LinkConfig::new(HandshakeConfig::new(
        role,
        "dr",
        (role == Role::Shipper).then(|| "cluster-A".to_string()),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_session_over_loopback_mirrors_the_source() {
    let f = fixture();
    let last = f.segs.len() - 1;
    let mut items = Vec::new();
    for (i, (base, bytes)) in f.segs.iter().enumerate() {
        items.extend(chunks_of(*base, bytes, 2).into_iter().map(FeedItem::Chunk));
        if i < last {
            items.push(FeedItem::Seal(seal_of(&f.source, *base, bytes, true)));
        }
    }
    // Half of it already applied before the session: the Resume must make the shipper continue from there.
    let mut appender = TailAppender::open(&f.mirror).unwrap();
    for item in &items[..items.len() / 2] {
        match item {
            FeedItem::Chunk(c) => appender.apply_chunk(c).await.unwrap(),
            FeedItem::Seal(s) => appender.apply_seal(s).await.unwrap(),
            FeedItem::LogStart(l) => appender.apply_log_start(l).await.unwrap(),
            FeedItem::Replace(r) => appender.apply_replace(r).await.unwrap(),
            FeedItem::Progress(p) => appender.apply_progress(p, TruncateMode::HighWatermark).await.unwrap(),
            FeedItem::Claim(_) | FeedItem::Roll(_) => unreachable!("not in this feed"),
            FeedItem::Truncate(t) => panic!("no truncation in this history, yet {t:?}"),
        }
    }
    let watcher = appender.clone();
    let applier = ApplierSession::new(appender, config()).unwrap();
    let mut shipper = ShipperSession::new(ReplayFeed { items, next: 0 }, config()).unwrap();

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let shutdown = CancellationToken::new();
    let a = tokio::spawn(listen(
        listener,
        Acceptor::Plain,
        link(Role::Applier),
        applier,
        shutdown.clone(),
    ));
    let stop = shutdown.clone();
    let s = tokio::spawn(async move { dial(&addr, &Dialer::Plain, &link(Role::Shipper), &mut shipper, &stop).await });

    let (last_base, last_bytes) = &f.segs[last];
    let want = (*last_base, last_bytes.len() as u64);
    let reached = tokio::time::timeout(GIVE_UP, async {
        let mut w = watcher.clone();
        loop {
            let now = w.durable_positions().await.unwrap();
            if now.first().map(|d| (d.position.segment_base, d.position.position)) == Some(want) {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .await;
    shutdown.cancel();
    let (_, listened) = a.await.unwrap();
    listened.unwrap();
    s.await.unwrap().unwrap();
    assert!(reached.is_ok(), "the mirror never reached {want:?}");
    for (base, bytes) in &f.segs {
        assert_eq!(
            &std::fs::read(mirror_log(&f.mirror, *base)).unwrap(),
            bytes,
            "segment {base}"
        );
    }
    let mut w = watcher;
    let d = w.durable_positions().await.unwrap();
    assert_eq!(d.len(), 1);
    assert!(!d[0].sealed, "the active segment is not sealed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_session_over_loopback_applies_the_sources_log_start() {
    log_start_session(None).await;
}

/// A shipper that does not offer the log-start feature: the LogStart item is dropped unsent and the mirror keeps
/// every segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_session_without_the_log_start_feature_keeps_every_segment() {
    log_start_session(Some(0)).await;
}

/// Ships every segment with a LogStart after segment 2's seal; `shipper_features` overrides what the shipper offers.
async fn log_start_session(shipper_features: Option<u64>) {
    let f = fixture();
    let last = f.segs.len() - 1;
    let mut items = Vec::new();
    for (i, (base, bytes)) in f.segs.iter().enumerate() {
        items.extend(chunks_of(*base, bytes, 2).into_iter().map(FeedItem::Chunk));
        if i < last {
            items.push(FeedItem::Seal(seal_of(&f.source, *base, bytes, true)));
        }
        if i == 2 {
            // The source deleted segments 0 and 1 once segment 2 was sealed.
            items.push(FeedItem::LogStart(segmirror_transport::direct::payload::LogStart {
                partition: seal_of(&f.source, *base, bytes, true).partition,
                log_start_offset: f.segs[2].0,
            }));
        }
    }
    let appender = TailAppender::open(&f.mirror).unwrap();
    let watcher = appender.clone();
    let applier = ApplierSession::new(appender, config()).unwrap();
    let mut shipper = ShipperSession::new(ReplayFeed { items, next: 0 }, config()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let shutdown = CancellationToken::new();
    let a = tokio::spawn(listen(
        listener,
        Acceptor::Plain,
        link(Role::Applier),
        applier,
        shutdown.clone(),
    ));
    let stop = shutdown.clone();
    let mut shipper_link = link(Role::Shipper);
    if let Some(features) = shipper_features {
        shipper_link.handshake.features_supported = features;
    }
    let s = tokio::spawn(async move { dial(&addr, &Dialer::Plain, &shipper_link, &mut shipper, &stop).await });
    let (last_base, last_bytes) = &f.segs[last];
    let want = (*last_base, last_bytes.len() as u64);
    let reached = tokio::time::timeout(GIVE_UP, async {
        let mut w = watcher.clone();
        loop {
            let now = w.durable_positions().await.unwrap();
            if now.first().map(|d| (d.position.segment_base, d.position.position)) == Some(want) {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .await;
    shutdown.cancel();
    let (_, listened) = a.await.unwrap();
    listened.unwrap();
    s.await.unwrap().unwrap();
    assert!(reached.is_ok(), "the mirror never reached {want:?}");
    let p = seal_of(&f.source, f.segs[0].0, &f.segs[0].1, true).partition;
    if shipper_features.is_some() {
        for (base, bytes) in &f.segs {
            assert_eq!(
                &std::fs::read(mirror_log(&f.mirror, *base)).unwrap(),
                bytes,
                "segment {base} kept"
            );
        }
        assert_eq!(tailed_log_start(&f.mirror, &p.topic, p.partition).unwrap(), None);
        return;
    }
    for (i, (base, bytes)) in f.segs.iter().enumerate() {
        let path = mirror_log(&f.mirror, *base);
        if i < 2 {
            assert!(
                !path.exists(),
                "segment {base} was deleted at the source and must be gone from the mirror"
            );
        } else {
            assert_eq!(&std::fs::read(&path).unwrap(), bytes, "segment {base}");
        }
    }
    assert_eq!(
        tailed_log_start(&f.mirror, &p.topic, p.partition).unwrap(),
        Some(f.segs[2].0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_session_over_loopback_installs_a_compacted_replacement() {
    use segmirror_transport::direct::payload::{ReplaceEnd, SegmentReplace};
    let f = fixture();
    let last = f.segs.len() - 1;
    let mut items = Vec::new();
    for (i, (base, bytes)) in f.segs.iter().enumerate() {
        items.extend(chunks_of(*base, bytes, 2).into_iter().map(FeedItem::Chunk));
        if i < last {
            items.push(FeedItem::Seal(seal_of(&f.source, *base, bytes, true)));
        }
    }
    // The source's cleaner merged segments 0 and 1: the new file travels in pieces smaller than the credit window.
    let new = super::replace::tests::compacted(&f.segs[..2]);
    let bases = [f.segs[0].0, f.segs[1].0];
    let p = seal_of(&f.source, bases[0], &f.segs[0].1, true).partition;
    let seal = super::replace::tests::replace_seal(&p, &bases, &new);
    let pieces: Vec<&[u8]> = new.chunks(1000).collect();
    for (i, piece) in pieces.iter().enumerate() {
        items.push(FeedItem::Replace(SegmentReplace {
            partition: p.clone(),
            replaced_bases: bases.to_vec(),
            position: (i * 1000) as u64,
            bytes: bytes::Bytes::copy_from_slice(piece),
            end: (i + 1 == pieces.len()).then(|| ReplaceEnd {
                final_size: seal.final_size,
                log_sha256: seal.log_sha256,
                companions: seal.companions.clone(),
                next_base: None,
            }),
        }));
    }
    // Then the active segment grows on (a chunk after the replacement shows it was applied in order).
    let appender = TailAppender::open(&f.mirror).unwrap();
    let watcher = appender.clone();
    let applier = ApplierSession::new(appender, config()).unwrap();
    let mut shipper = ShipperSession::new(ReplayFeed { items, next: 0 }, config()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let shutdown = CancellationToken::new();
    let a = tokio::spawn(listen(
        listener,
        Acceptor::Plain,
        link(Role::Applier),
        applier,
        shutdown.clone(),
    ));
    let stop = shutdown.clone();
    let s = tokio::spawn(async move { dial(&addr, &Dialer::Plain, &link(Role::Shipper), &mut shipper, &stop).await });
    let merged_away = mirror_log(&f.mirror, bases[1]);
    let reached = tokio::time::timeout(GIVE_UP, async {
        let mut w = watcher.clone();
        loop {
            w.durable_positions().await.unwrap();
            if std::fs::read(mirror_log(&f.mirror, bases[0])).ok().as_deref() == Some(&new[..]) && !merged_away.exists()
            {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .await;
    shutdown.cancel();
    let (_, listened) = a.await.unwrap();
    listened.unwrap();
    s.await.unwrap().unwrap();
    assert!(reached.is_ok(), "the replacement was never installed");
    for (base, bytes) in &f.segs[2..] {
        assert_eq!(
            &std::fs::read(mirror_log(&f.mirror, *base)).unwrap(),
            bytes,
            "segment {base}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_session_records_the_sources_progress() {
    progress_session(None).await;
}

/// A shipper without the source-progress feature drops the report unsent: nothing is recorded, nothing fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_session_without_the_progress_feature_records_none() {
    use segmirror_transport::direct::handshake::{FEATURE_LOG_START, FEATURE_SEGMENT_REPLACE};
    progress_session(Some(FEATURE_LOG_START | FEATURE_SEGMENT_REPLACE)).await;
}

/// Ships the first segment with a SourceProgress before its chunks; `shipper_features` overrides the offer.
async fn progress_session(shipper_features: Option<u64>) {
    let f = fixture();
    let (base, bytes) = &f.segs[0];
    let partition = seal_of(&f.source, *base, bytes, true).partition;
    let report = SourceProgress {
        partition: partition.clone(),
        log_end_offset: 12_345,
        high_watermark: None,
        active_segment_base: 12_000,
        active_segment_size: 777,
        shipper_time_ms: 42,
        shipped: None,
    };
    let mut items = vec![FeedItem::Progress(report.clone())];
    items.extend(chunks_of(*base, bytes, 2).into_iter().map(FeedItem::Chunk));
    let appender = TailAppender::open(&f.mirror).unwrap();
    let watcher = appender.clone();
    let applier = ApplierSession::new(appender, config()).unwrap();
    let mut shipper = ShipperSession::new(ReplayFeed { items, next: 0 }, config()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let shutdown = CancellationToken::new();
    let a = tokio::spawn(listen(
        listener,
        Acceptor::Plain,
        link(Role::Applier),
        applier,
        shutdown.clone(),
    ));
    let stop = shutdown.clone();
    let mut shipper_link = link(Role::Shipper);
    if let Some(features) = shipper_features {
        shipper_link.handshake.features_supported = features;
    }
    let s = tokio::spawn(async move { dial(&addr, &Dialer::Plain, &shipper_link, &mut shipper, &stop).await });
    let want = (*base, bytes.len() as u64);
    let reached = tokio::time::timeout(GIVE_UP, async {
        let mut w = watcher.clone();
        loop {
            let now = w.durable_positions().await.unwrap();
            if now.first().map(|d| (d.position.segment_base, d.position.position)) == Some(want) {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .await;
    shutdown.cancel();
    let (_, listened) = a.await.unwrap();
    listened.unwrap();
    s.await.unwrap().unwrap();
    assert!(reached.is_ok(), "the mirror never reached {want:?}");
    // The chunks after the report were applied, so the report (sent before them) was handled first.
    let recorded = recorded_progress(&f.mirror, &partition.topic, partition.partition).unwrap();
    if shipper_features.is_some() {
        assert_eq!(recorded, None);
        return;
    }
    let recorded = recorded.expect("the report was recorded");
    assert_eq!(
        (
            recorded.log_end_offset,
            recorded.high_watermark,
            recorded.active_segment_base,
            recorded.active_segment_size,
            recorded.shipper_time_ms
        ),
        (12_345, None, 12_000, 777, 42)
    );
}
