//! A broken or hostile shipper against the real appender behind a listening `ApplierSession` over loopback TCP:
//! its bad bytes end its own session (with a Goodbye naming the cause), never the listener, and the honest shipper
//! that dials next mirrors the source exactly; a recreated source topic stops its partition alone while the
//! link's other partitions keep replicating in the same session, until an operator's reset makes the next session
//! archive the old lineage and mirror the new topic from its start.

use std::time::Duration;

use bytes::Bytes;
use segmirror_catalog::{Catalog, PartitionKey, PartitionState as CatalogState};
use segmirror_transport::direct::error::ErrorClass;
use segmirror_transport::direct::frame::{encode, Frame, MAX_PAYLOAD_LEN};
use segmirror_transport::direct::handshake::HandshakeConfig;
use segmirror_transport::direct::payload::{Position, Role};
use segmirror_transport::direct::session::link::{dial, listen, Acceptor, Dialer, LinkConfig, LinkEvent};
use segmirror_transport::direct::session::{ApplierSession, ChunkFeed, FeedItem, SessionConfig, ShipperSession};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::tests::{chunks_of, fixture, mirror_log, pref, seal_of, Fixture};
use super::*;

/// Bound on each wait: a failure guard only, nothing is asserted about speed.
const GIVE_UP: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(20);

/// Replays fixed items per partition, from each partition's Resume position on (a partition the Resume does not
/// name, or names with another topic id, from its start).
struct Replay {
    items: Vec<FeedItem>,
    next: usize,
}

fn item_partition(item: &FeedItem) -> &PartitionRef {
    match item {
        FeedItem::Chunk(c) => &c.partition,
        FeedItem::Seal(s) => &s.partition,
        other => panic!("not in this feed: {other:?}"),
    }
}

impl ChunkFeed for Replay {
    async fn seek(&mut self, resume: &[Position]) -> DirectResult<()> {
        let covered = |item: &FeedItem| {
            let Some(r) = resume.iter().find(|r| &r.partition == item_partition(item)) else {
                return false;
            };
            match item {
                FeedItem::Chunk(c) => {
                    c.segment_base < r.segment_base
                        || (c.segment_base == r.segment_base && c.position + c.bytes.len() as u64 <= r.position)
                }
                FeedItem::Seal(s) => s.segment_base < r.segment_base,
                _ => unreachable!(),
            }
        };
        self.items.retain(|i| !covered(i));
        self.next = 0;
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

fn link(role: Role, events: mpsc::Sender<LinkEvent>) -> LinkConfig {
    let mut config = LinkConfig::new(HandshakeConfig::new(
        role,
        "dr",
        (role == Role::Shipper).then(|| "cluster-A".to_string()),
    ));
    config.events = Some(events);
    config
}

/// The listening applier over `appender`, until `shutdown`: its address, its task, its link events.
async fn serve(
    appender: TailAppender,
    shutdown: &CancellationToken,
) -> (
    String,
    tokio::task::JoinHandle<(ApplierSession<TailAppender>, DirectResult<()>)>,
    mpsc::Receiver<LinkEvent>,
) {
    let applier = ApplierSession::new(appender, config()).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (tx, events) = mpsc::channel(256);
    let served = tokio::spawn(listen(
        listener,
        Acceptor::Plain,
        link(Role::Applier, tx),
        applier,
        shutdown.clone(),
    ));
    (addr, served, events)
}

/// Every chunk and seal of the fixture's partition, as `partition`.
fn history(f: &Fixture, partition: &PartitionRef) -> Vec<FeedItem> {
    let last = f.segs.len() - 1;
    let mut items = Vec::new();
    for (i, (base, bytes)) in f.segs.iter().enumerate() {
        items.extend(chunks_of(*base, bytes, 2).into_iter().map(|mut c| {
            c.partition = partition.clone();
            FeedItem::Chunk(c)
        }));
        if i < last {
            let mut seal = seal_of(&f.source, *base, bytes, true);
            seal.partition = partition.clone();
            items.push(FeedItem::Seal(seal));
        }
    }
    items
}

/// Waits until `watcher` reports `partition` durable at `want` (segment base, position).
async fn reaches(watcher: &TailAppender, partition: &PartitionRef, want: (i64, u64)) -> bool {
    let mut w = watcher.clone();
    tokio::time::timeout(GIVE_UP, async {
        loop {
            let now = w.durable_positions().await.unwrap();
            let at = now
                .iter()
                .find(|d| &d.position.partition == partition)
                .map(|d| (d.position.segment_base, d.position.position));
            if at == Some(want) {
                return;
            }
            tokio::time::sleep(POLL).await;
        }
    })
    .await
    .is_ok()
}

/// Waits for the first event `pick` accepts.
async fn event<T>(rx: &mut mpsc::Receiver<LinkEvent>, mut pick: impl FnMut(LinkEvent) -> Option<T>) -> T {
    tokio::time::timeout(GIVE_UP, async {
        loop {
            let e = rx.recv().await.expect("the link's events ended");
            if let Some(t) = pick(e) {
                return t;
            }
        }
    })
    .await
    .expect("no such event")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bytes_end_the_peers_session_never_the_listener_and_the_next_shipper_is_served() {
    let f = fixture();
    let appender = TailAppender::open(&f.mirror).unwrap();
    let watcher = appender.clone();
    let shutdown = CancellationToken::new();
    let (addr, served, mut applier_events) = serve(appender, &shutdown).await;

    // Three hostile sessions in turn: a batch whose CRC fails, a first chunk that does not start at 0, and a topic
    // name Kafka refuses. Each frame is well formed (its frame CRC is right): only the content is bad.
    let (base, bytes) = &f.segs[0];
    let good = chunks_of(*base, bytes, 2);
    let mut corrupt = good[0].clone();
    let mut v = corrupt.bytes.to_vec();
    let last = v.len() - 1;
    v[last] ^= 0x55;
    corrupt.bytes = Bytes::from(v);
    // A name Kafka refuses (one that would climb out of the mirror root) is refused by the frame decoder itself:
    // the connection closes at that frame, no Goodbye (the stream cannot be trusted past it).
    let cases = [
        ("CRC stored", encoded(&corrupt), true),
        ("must start at 0", encoded(&good[1]), true),
        ("not a valid Kafka topic name", with_topic(&good[0], "../etc"), false),
    ];
    for (cause, frame, goodbye) in cases {
        // A hostile peer speaks the protocol itself: the shipper session would never send such a chunk.
        let told = hostile_frame(&addr, frame).await;
        if goodbye {
            assert!(told.contains(cause), "{cause}: the shipper was told {told:?}");
        }
        // The applier ended that session as the peer's fault, and goes on listening.
        let (class, message) = event(&mut applier_events, |e| match e {
            LinkEvent::SessionEnded { error: Some(e), .. } => Some(e),
            _ => None,
        })
        .await;
        assert_eq!(class, ErrorClass::Transient, "{cause}: {message}");
        assert!(message.contains(cause), "{cause}: {message}");
        assert!(!served.is_finished(), "{cause}: the listener stopped");
        assert_eq!(
            file_len(&mirror_log(&f.mirror, *base)),
            0,
            "{cause}: something was written"
        );
    }

    // The honest shipper, next: the whole partition, byte for byte.
    let mut honest = ShipperSession::new(
        Replay {
            items: history(&f, &pref()),
            next: 0,
        },
        config(),
    )
    .unwrap();
    let (ship_tx, _ship_events) = mpsc::channel(256);
    let stop = shutdown.clone();
    let dialler =
        tokio::spawn(
            async move { dial(&addr, &Dialer::Plain, &link(Role::Shipper, ship_tx), &mut honest, &stop).await },
        );
    let (last_base, last_bytes) = f.segs.last().unwrap();
    let reached = reaches(&watcher, &pref(), (*last_base, last_bytes.len() as u64)).await;
    shutdown.cancel();
    let (_, listened) = served.await.unwrap();
    listened.unwrap();
    dialler.await.unwrap().unwrap();
    assert!(reached, "the honest shipper's session never completed the mirror");
    for (base, bytes) in &f.segs {
        assert_eq!(
            &std::fs::read(mirror_log(&f.mirror, *base)).unwrap(),
            bytes,
            "segment {base}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_topic_stops_its_partition_alone_and_the_others_keep_replicating() {
    let f = fixture();
    let catalog_path = f.mirror.parent().unwrap().join("catalog.sqlite");
    let open = || {
        TailAppender::open_with_catalog(
            &f.mirror,
            TailCatalog::open(Catalog::open(&catalog_path).unwrap(), "dr").unwrap(),
        )
        .unwrap()
    };
    // The mirror holds the first segment of the old lineage.
    let mut before = open();
    let (base0, bytes0) = &f.segs[0];
    for c in chunks_of(*base0, bytes0, 2) {
        before.apply_chunk(&c).await.unwrap();
    }
    drop(before);

    // The source topic was deleted and recreated (another topic id), and the link carries another partition.
    let recreated = PartitionRef {
        topic_id: [0x5a; 16],
        ..pref()
    };
    let other = PartitionRef {
        partition: pref().partition + 1,
        ..pref()
    };
    let mut items = Vec::new();
    let (mut a, mut b) = (history(&f, &recreated).into_iter(), history(&f, &other).into_iter());
    loop {
        match (a.next(), b.next()) {
            (None, None) => break,
            (x, y) => items.extend(x.into_iter().chain(y)),
        }
    }
    let appender = open();
    let watcher = appender.clone();
    let shutdown = CancellationToken::new();
    let (addr, served, mut applier_events) = serve(appender, &shutdown).await;
    let mut shipper = ShipperSession::new(Replay { items, next: 0 }, config()).unwrap();
    let (ship_tx, _ship_events) = mpsc::channel(256);
    let stop = shutdown.clone();
    let dialler = tokio::spawn(async move {
        dial(
            &addr,
            &Dialer::Plain,
            &link(Role::Shipper, ship_tx),
            &mut shipper,
            &stop,
        )
        .await
    });

    let (last_base, last_bytes) = f.segs.last().unwrap();
    let want = (*last_base, last_bytes.len() as u64);
    let reached = reaches(&watcher, &other, want).await;
    // One session did all of it: the stopped partition did not end it.
    let ended = applier_events.try_recv();
    assert!(reached, "the other partition did not complete");
    assert!(
        !matches!(ended, Ok(LinkEvent::SessionEnded { .. })),
        "the session ended: {ended:?}"
    );
    let other_dir = f.mirror.join(format!("{}-{}", other.topic, other.partition));
    for (base, bytes) in &f.segs {
        let path = other_dir.join(segment_file_name(*base, SegmentFileKind::Log));
        assert_eq!(&std::fs::read(path).unwrap(), bytes, "segment {base}");
    }
    // The recreated partition: the old lineage's bytes untouched, nothing of the new one, paused and said why.
    assert_eq!(&std::fs::read(mirror_log(&f.mirror, *base0)).unwrap(), bytes0);
    assert!(!mirror_log(&f.mirror, f.segs[1].0).exists());
    let key = PartitionKey::new("dr", &pref().topic, pref().partition);
    let mut catalog = Catalog::open(&catalog_path).unwrap();
    assert_eq!(catalog.partition(&key).unwrap().state, CatalogState::Paused);
    let events = catalog
        .events(Some(segmirror_catalog::Subject::Partition(&key)), 1)
        .unwrap();
    assert!(
        events[0].kind == segmirror_catalog::EventKind::LineageBreak && events[0].detail.contains("reset-partition"),
        "{events:?}"
    );

    // The operator resets the partition (what `segmirror link reset-partition` does) while both sides run: the
    // session ends within seconds, the next one archives the old lineage and mirrors the new topic from its start.
    catalog.accept_lineage(&key).unwrap();
    let reset = reaches(&watcher, &recreated, want).await;
    shutdown.cancel();
    let (_, listened) = served.await.unwrap();
    listened.unwrap();
    dialler.await.unwrap().unwrap();
    assert!(reset, "the reset partition did not complete");
    for (base, bytes) in &f.segs {
        assert_eq!(
            &std::fs::read(mirror_log(&f.mirror, *base)).unwrap(),
            bytes,
            "segment {base}"
        );
    }
    let row = catalog.partition(&key).unwrap();
    assert_eq!(row.state, CatalogState::Mirroring);
    assert_eq!(row.source_topic_id, Uuid(recreated.topic_id).to_string());
    assert_eq!(catalog.pending_lineage(row.id).unwrap(), None);
    // The old lineage is archived, never deleted.
    let archive = crate::mirror::partition_archive_dir(&f.mirror, &format!("{}-{}", pref().topic, pref().partition));
    let kept: Vec<_> = std::fs::read_dir(&archive)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(
        &std::fs::read(kept[0].join(segment_file_name(*base0, SegmentFileKind::Log))).unwrap(),
        bytes0
    );
}

/// `chunk` as a Chunk frame's bytes.
fn encoded(chunk: &Chunk) -> Vec<u8> {
    let mut out = bytes::BytesMut::new();
    encode(&Frame::Chunk(chunk.clone()), MAX_PAYLOAD_LEN, &mut out).unwrap();
    out.to_vec()
}

/// `chunk` as a Chunk frame whose topic is `topic`, which this side's encoder refuses to write: encoded with a
/// placeholder name of the same length, the name's bytes replaced, the frame's CRC-32C sealed again.
fn with_topic(chunk: &Chunk, topic: &str) -> Vec<u8> {
    let mut c = chunk.clone();
    c.partition.topic = "x".repeat(topic.len());
    let mut out = encoded(&c);
    // Header (type, flags, length), then the partition: the topic's u16 length and its bytes.
    out[8..8 + topic.len()].copy_from_slice(topic.as_bytes());
    let n = out.len();
    let crc = crc32c::crc32c(&out[..n - 4]);
    out[n - 4..].copy_from_slice(&crc.to_be_bytes());
    out
}

/// Dials `addr` as a shipper, completes the handshake, waits for the applier's credit, writes `frame` (a frame's
/// bytes) and returns the message of the Goodbye the applier answers with, or what ended the connection.
async fn hostile_frame(addr: &str, frame: Vec<u8>) -> String {
    use futures::StreamExt;
    use segmirror_transport::direct::handshake::handshake;
    use tokio::io::AsyncWriteExt;
    tokio::time::timeout(GIVE_UP, async {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let config = HandshakeConfig::new(Role::Shipper, "dr", Some("cluster-A".to_string()));
        let (mut framed, _session) = handshake(tcp, &config).await.unwrap();
        loop {
            match framed.next().await.expect("closed before credit").unwrap() {
                Frame::Credit { .. } => break,
                _ => continue,
            }
        }
        framed.get_mut().write_all(&frame).await.unwrap();
        loop {
            match framed.next().await {
                Some(Ok(Frame::Goodbye(g))) => return g.message,
                Some(Ok(_)) => continue,
                Some(Err(e)) => return format!("connection error: {e}"),
                None => return "closed".to_string(),
            }
        }
    })
    .await
    .expect("the applier never answered")
}

fn file_len(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// A chunk of valid batches whose records differ from the source's (a byte of its last batch changed and the
/// batch's CRC sealed again): every check a chunk can pass on its own, it passes.
fn forged(c: &Chunk) -> Chunk {
    let mut forged = c.clone();
    let mut v = forged.bytes.to_vec();
    let last_batch = segment_format::log::scan_frames(&v, 0)
        .last()
        .unwrap()
        .unwrap()
        .info
        .position as usize;
    let end = v.len();
    v[end - 1] ^= 0x01;
    segment_format::batch::seal_crc(&mut v[last_batch..]);
    forged.bytes = Bytes::from(v);
    forged
}

/// Forged bytes installed before anything could tell (valid batches at the right offsets) are found at the seal,
/// whose digest the mirror's bytes do not match: the segment is quarantined (archived, never deleted) and starts
/// again at byte 0, so the honest shipper's next session resends it and the mirror ends equal to the source.
#[tokio::test]
async fn a_forged_segment_is_quarantined_at_its_seal_and_resent() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let honest = |i: usize| chunks_of(f.segs[i].0, &f.segs[i].1, 2);
    let seal = |i: usize| seal_of(&f.source, f.segs[i].0, &f.segs[i].1, true);

    // The partition's only segment forged: the whole partition is archived and starts afresh.
    let (base0, bytes0) = &f.segs[0];
    let mut chunks = honest(0);
    chunks[0] = forged(&chunks[0]);
    for c in &chunks {
        a.apply_chunk(c).await.unwrap();
    }
    let e = a.apply_seal(&seal(0)).await.unwrap_err();
    assert_eq!(e.class(), ErrorClass::Transient, "{e}");
    assert!(e.to_string().contains("archived"), "{e}");
    assert_eq!(
        a.durable_positions().await.unwrap(),
        vec![],
        "the partition starts afresh"
    );
    let archive = crate::mirror::partition_archive_dir(&f.mirror, &format!("{}-{}", pref().topic, pref().partition));
    let kept: Vec<_> = std::fs::read_dir(&archive)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let forged_bytes: Vec<u8> = chunks.iter().flat_map(|c| c.bytes.to_vec()).collect();
    assert_eq!(
        std::fs::read(kept[0].join(segment_file_name(*base0, SegmentFileKind::Log))).unwrap(),
        forged_bytes
    );
    for c in honest(0) {
        a.apply_chunk(&c).await.unwrap();
    }
    a.apply_seal(&seal(0)).await.unwrap();

    // A later segment forged: cut back to its start as a source truncation is (archived), then resent.
    let (base1, bytes1) = &f.segs[1];
    let mut chunks = honest(1);
    let last = chunks.len() - 1;
    chunks[last] = forged(&chunks[last]);
    for c in &chunks {
        a.apply_chunk(c).await.unwrap();
    }
    let e = a.apply_seal(&seal(1)).await.unwrap_err();
    assert!(e.to_string().contains("archived"), "{e}");
    let at = a.durable_positions().await.unwrap();
    assert_eq!((at[0].position.segment_base, at[0].position.position), (*base1, 0));
    for c in honest(1) {
        a.apply_chunk(&c).await.unwrap();
    }
    a.apply_seal(&seal(1)).await.unwrap();
    assert_eq!(&std::fs::read(mirror_log(&f.mirror, *base0)).unwrap(), bytes0);
    assert_eq!(&std::fs::read(mirror_log(&f.mirror, *base1)).unwrap(), bytes1);
}

/// One partition's files failing on this side while chunks arrive (here its segment's path became a directory, as
/// a damaged or misused disk leaves it) stop that partition, not the group nor the link: the other partition's
/// chunks of the same group are applied once the stopped one's are set aside, as the session does. (At a session's
/// start the mirror's state is checked whole, and a partition that fails there still stops the applier.)
#[tokio::test]
async fn a_local_failure_of_one_partitions_files_stops_that_partition_only() {
    let f = fixture();
    let mut a = TailAppender::open(&f.mirror).unwrap();
    let other = PartitionRef {
        partition: pref().partition + 1,
        ..pref()
    };
    let (base, bytes) = &f.segs[0];
    let chunks = chunks_of(*base, bytes, 2);
    a.apply_chunk(&chunks[0]).await.unwrap();
    let path = mirror_log(&f.mirror, *base);
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    let mut theirs = chunks[0].clone();
    theirs.partition = other.clone();
    let e = a.apply_chunks(&[chunks[1].clone(), theirs.clone()]).await.unwrap_err();
    assert!(
        matches!(&e, DirectError::PartitionStopped { partition, .. } if *partition == pref()),
        "{e:?}"
    );
    assert!(e.to_string().contains("tried again"), "{e}");
    a.apply_chunks(&[theirs]).await.unwrap();
    let recorded = a.inner.lock().unwrap().states[&tp_name(&other)].position;
    assert_eq!(recorded, chunks[0].bytes.len() as u64);
    // Not before the retry delay: a lasting failure does not restart sessions in a loop.
    assert!(!a.writable_again(&[pref()]).await.unwrap());
}
