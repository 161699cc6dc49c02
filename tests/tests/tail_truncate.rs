//! Source truncation through the whole tail pipeline, without a broker: `TailFeed` (log-end mode) over a source
//! partition written byte for byte by segment-format's writer → `ShipperSession` ↔ `ApplierSession` over TCP →
//! `TailAppender` with a catalog. The source is then truncated below what was shipped and continued under a new
//! leader epoch (its `leader-epoch-checkpoint` updated as a broker does), and a second session must bring the
//! mirror back to the source byte for byte, with the removed batches in the archive and the catalog; in
//! high-watermark mode the same divergence is recorded and nothing is cut. And a source with small segments
//! truncated below its last roll (Kafka's `truncateTo`: the later segments deleted, the older one active again):
//! the mirror's sealed segment becomes the active one again, the later ones go to the archive whole.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use segment_format::dir::{segment_file_name, SegmentFileKind};
use segment_format::log::scan_frames;
use segment_format::partition_metadata::Uuid;
use segment_format::record::{BatchBuilder, RecordSpec};
use segment_format::writer::{PartitionWriter, WriterConfig};
use segmirror_applier::direct::{archive_path, TailAppender, TailCatalog};
use segmirror_catalog::{Catalog, TruncationKind};
use segmirror_shipper::direct::{TailFeed, TailFeedConfig, TailPartition};
use segmirror_shipper::source::{HighWatermark, HighWatermarkSource, UptoPolicy};
use segmirror_transport::direct::handshake::HandshakeConfig;
use segmirror_transport::direct::payload::PartitionRef;
use segmirror_transport::direct::session::{ApplierSession, BoxIo, SessionConfig, ShipperSession};
use segmirror_transport::direct::{handshake, Role};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const TOPIC: &str = "orders";
const TOPIC_ID: [u8; 16] = [4; 16];
const LINK: &str = "trunc";

/// A fixed high watermark for every partition.
struct FixedHw(i64);

impl HighWatermarkSource for FixedHw {
    fn high_watermark(&self, _topic: &str, _partition: i32) -> Option<HighWatermark> {
        Some(HighWatermark {
            offset: self.0,
            as_of: std::time::SystemTime::now(),
        })
    }
}

fn batch(offset: i64, epoch: i32, tag: u8) -> BatchBuilder {
    let mut b = BatchBuilder::new(offset).partition_leader_epoch(epoch);
    for r in 0..3 {
        b = b.record(RecordSpec::new(r, 1_700_000_000_000 + offset).with_value(vec![tag; 80]));
    }
    b
}

/// A source partition of one segment: 10 batches of 3 records in leader epoch 3. Returns its directory.
fn write_source(root: &Path) -> PathBuf {
    let cfg = WriterConfig {
        fsync: false,
        topic_id: Some(Uuid(TOPIC_ID)),
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(root, TOPIC, 0, 0, cfg).expect("writer");
    w.become_leader(3);
    for _ in 0..10 {
        let at = w.next_offset();
        w.append(batch(at, 3, b'a')).expect("append");
    }
    let dir = w.dir().to_path_buf();
    w.close().expect("close");
    dir
}

fn log(dir: &Path) -> PathBuf {
    dir.join(segment_file_name(0, SegmentFileKind::Log))
}

/// What a leader change with truncation leaves: the log cut at its `keep`-th batch, then `more` batches of epoch
/// 5 from there, and the epoch recorded in `leader-epoch-checkpoint`. Returns the cut offset and byte.
fn truncate_and_continue(dir: &Path, keep: usize, more: usize) -> (i64, u64) {
    let bytes = std::fs::read(log(dir)).expect("read");
    let frames: Vec<_> = scan_frames(&bytes, 0).map(|f| f.expect("frame").info).collect();
    let cut = frames[keep].position;
    let at = frames[keep].base_offset;
    let mut kept = bytes[..cut as usize].to_vec();
    for i in 0..more {
        kept.extend_from_slice(&batch(at + 3 * i as i64, 5, b'z').build());
    }
    std::fs::write(log(dir), &kept).expect("write");
    std::fs::write(dir.join("leader-epoch-checkpoint"), format!("0\n2\n3 0\n5 {at}\n")).expect("epochs");
    (at, cut)
}

async fn pair() -> (
    (
        segmirror_transport::direct::session::FramedIo,
        segmirror_transport::direct::Session,
    ),
    (
        segmirror_transport::direct::session::FramedIo,
        segmirror_transport::direct::Session,
    ),
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let applier = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.expect("accept");
        handshake(Box::new(tcp) as BoxIo, &HandshakeConfig::new(Role::Applier, LINK, None)).await
    });
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let shipper = handshake(
        Box::new(tcp) as BoxIo,
        &HandshakeConfig::new(Role::Shipper, LINK, Some("cluster".into())),
    )
    .await
    .expect("shipper handshake");
    (shipper, applier.await.expect("join").expect("applier handshake"))
}

fn session_config() -> SessionConfig {
    SessionConfig {
        heartbeat_interval: Duration::from_millis(100),
        idle_timeout: Duration::from_secs(5),
        ..SessionConfig::default()
    }
}

/// One session between a fresh feed over `source` and an appender over `mirror`, until `done` says the mirror is
/// where it should be (checked every 20 ms, at most 20 s), then both stop.
async fn session(source: &Path, mirror: &Path, catalog: &Path, upto: UptoPolicy, done: impl Fn() -> bool) {
    let mut config = TailFeedConfig::new(Arc::new(FixedHw(i64::MAX)));
    config.upto = upto;
    config.poll_interval = Duration::from_millis(10);
    let feed = TailFeed::new(
        vec![TailPartition {
            partition: PartitionRef {
                topic: TOPIC.into(),
                partition: 0,
                topic_id: TOPIC_ID,
            },
            dir: source.to_path_buf(),
        }],
        config,
    );
    let mut shipper = ShipperSession::new(feed, session_config()).expect("shipper");
    let catalog = Catalog::open(catalog).expect("catalog");
    let appender =
        TailAppender::open_with_catalog(mirror, TailCatalog::open(catalog, LINK).expect("link")).expect("appender");
    let mut applier = ApplierSession::new(appender, session_config()).expect("applier");
    let ((s_framed, s_session), (a_framed, a_session)) = pair().await;
    let stop = CancellationToken::new();
    let (s_stop, a_stop) = (stop.clone(), stop.clone());
    let s = tokio::spawn(async move { shipper.run(s_framed, &s_session, &s_stop).await });
    let a = tokio::spawn(async move { applier.run(a_framed, &a_session, &a_stop).await });
    let mut waited = Duration::ZERO;
    while !done() {
        assert!(waited < Duration::from_secs(20), "the mirror did not get there in 20 s");
        assert!(!s.is_finished() && !a.is_finished(), "a session ended early");
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += Duration::from_millis(20);
    }
    stop.cancel();
    let _ = s.await.expect("join shipper");
    let _ = a.await.expect("join applier");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_truncated_under_a_new_epoch_is_followed_and_the_removed_batches_archived() {
    let tmp = tempfile::tempdir().expect("tmp");
    let source = write_source(&tmp.path().join("source"));
    let mirror = tmp.path().join("mirror");
    let catalog = tmp.path().join("catalog.sqlite");
    let mirrored = mirror
        .join(format!("{TOPIC}-0"))
        .join(segment_file_name(0, SegmentFileKind::Log));
    let same = |a: &Path, b: &Path| std::fs::read(a).ok() == std::fs::read(b).ok();

    // 1. The mirror follows the source to its log end.
    let shipped = std::fs::read(log(&source)).expect("source");
    session(&source, &mirror, &catalog, UptoPolicy::LogEnd, || {
        same(&mirrored, &log(&source))
    })
    .await;

    // 2. The source drops its last 4 batches and goes on under epoch 5 with 6 others (longer than before).
    let (at, cut) = truncate_and_continue(&source, 6, 6);
    assert!(std::fs::read(log(&source)).expect("source").len() > shipped.len());

    // 3. The next session truncates the mirror to the source and ships the new batches.
    session(&source, &mirror, &catalog, UptoPolicy::LogEnd, || {
        same(&mirrored, &log(&source))
    })
    .await;
    assert_eq!(
        std::fs::read(&mirrored).expect("mirror"),
        std::fs::read(log(&source)).expect("source")
    );
    let end = at + 4 * 3;
    let rel = archive_path(TOPIC, 0, at, end);
    assert_eq!(
        std::fs::read(mirror.join(&rel)).expect("archive"),
        &shipped[cut as usize..]
    );
    let rows = Catalog::open(&catalog)
        .expect("catalog")
        .truncations(Some(LINK))
        .expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].kind, TruncationKind::Truncated);
    assert_eq!((rows[0].from_offset, rows[0].to_offset), (at, end));
    assert_eq!((rows[0].mirror_epoch, rows[0].source_epoch), (3, 3));
    assert_eq!(rows[0].archive_path.as_deref(), Some(rel.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_high_watermark_mode_a_source_that_lost_committed_records_stops_the_partition() {
    let tmp = tempfile::tempdir().expect("tmp");
    let source = write_source(&tmp.path().join("source"));
    let mirror = tmp.path().join("mirror");
    let catalog = tmp.path().join("catalog.sqlite");
    let mirrored = mirror
        .join(format!("{TOPIC}-0"))
        .join(segment_file_name(0, SegmentFileKind::Log));
    let shipped = std::fs::read(log(&source)).expect("source");
    session(&source, &mirror, &catalog, UptoPolicy::HighWatermark, || {
        std::fs::read(&mirrored).ok().as_deref() == Some(&shipped[..])
    })
    .await;
    let (at, _) = truncate_and_continue(&source, 6, 6);
    let recorded = || {
        Catalog::open(&catalog)
            .and_then(|c| c.truncations(Some(LINK)))
            .is_ok_and(|rows| !rows.is_empty())
    };
    session(&source, &mirror, &catalog, UptoPolicy::HighWatermark, recorded).await;
    // Nothing cut, nothing of the new epoch shipped: the mirror is what it was.
    assert_eq!(std::fs::read(&mirrored).expect("mirror"), shipped);
    let rows = Catalog::open(&catalog)
        .expect("catalog")
        .truncations(Some(LINK))
        .expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].kind, TruncationKind::Diverged);
    assert_eq!((rows[0].from_offset, rows[0].to_offset), (at, at + 12));
    assert!(!mirror.join(".archive").exists());
}

/// A source partition of several small segments: 12 batches of 3 records in leader epoch 3. Returns its directory.
fn write_rolled_source(root: &Path) -> PathBuf {
    let cfg = WriterConfig {
        fsync: false,
        segment_bytes: 1024,
        topic_id: Some(Uuid(TOPIC_ID)),
        ..WriterConfig::default()
    };
    let mut w = PartitionWriter::create(root, TOPIC, 0, 0, cfg).expect("writer");
    w.become_leader(3);
    for _ in 0..12 {
        let at = w.next_offset();
        w.append(batch(at, 3, b'a')).expect("append");
    }
    let dir = w.dir().to_path_buf();
    w.close().expect("close");
    dir
}

/// Every `.log` of a partition directory: (base offset, bytes), in offset order.
fn logs(dir: &Path) -> Vec<(i64, Vec<u8>)> {
    let mut out: Vec<(i64, Vec<u8>)> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| {
                let path = e.ok()?.path();
                let base = path.file_name()?.to_str()?.strip_suffix(".log")?.parse().ok()?;
                Some((base, std::fs::read(&path).ok()?))
            })
            .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_truncated_below_its_last_roll_makes_the_sealed_segment_active_again() {
    let tmp = tempfile::tempdir().expect("tmp");
    let source = write_rolled_source(&tmp.path().join("source"));
    let mirror = tmp.path().join("mirror");
    let catalog = tmp.path().join("catalog.sqlite");
    let mirror_dir = mirror.join(format!("{TOPIC}-0"));
    let same = || logs(&source) == logs(&mirror_dir);

    session(&source, &mirror, &catalog, UptoPolicy::LogEnd, same).await;
    let before = logs(&source);
    assert!(before.len() >= 3, "the source rolled: {} segments", before.len());

    // Kafka's truncateTo into the first segment at its second batch: the later segments (and their companions and
    // snapshots) deleted, the first cut, then 5 batches of epoch 5 appended there.
    let (base0, bytes0) = &before[0];
    let frames: Vec<_> = scan_frames(bytes0, 0).map(|f| f.expect("frame").info).collect();
    let (cut, at) = (frames[1].position as usize, frames[1].base_offset);
    for entry in std::fs::read_dir(&source).expect("source") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("").to_string();
        let offset = name.split('.').next().and_then(|n| n.parse::<i64>().ok());
        if offset.is_some_and(|o| o > at) {
            std::fs::remove_file(&path).expect("remove");
        }
    }
    let mut kept = bytes0[..cut].to_vec();
    for i in 0..5 {
        kept.extend_from_slice(&batch(at + 3 * i, 5, b'z').build());
    }
    std::fs::write(source.join(segment_file_name(*base0, SegmentFileKind::Log)), &kept).expect("write");
    std::fs::write(source.join("leader-epoch-checkpoint"), format!("0\n2\n3 0\n5 {at}\n")).expect("epochs");
    assert_eq!(logs(&source).len(), 1);

    session(&source, &mirror, &catalog, UptoPolicy::LogEnd, same).await;
    assert_eq!(logs(&mirror_dir), logs(&source));
    // The archive: the first segment's removed batches, then every later segment whole, in offset order.
    let mut removed = bytes0[cut..].to_vec();
    for (_, bytes) in &before[1..] {
        removed.extend_from_slice(bytes);
    }
    let end = scan_frames(&removed, 0)
        .map(|f| f.expect("frame").info.last_offset)
        .last()
        .expect("batches")
        + 1;
    let rel = archive_path(TOPIC, 0, at, end);
    assert_eq!(std::fs::read(mirror.join(&rel)).expect("archive"), removed);
    let catalog = Catalog::open(&catalog).expect("catalog");
    let rows = catalog.truncations(Some(LINK)).expect("rows");
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (rows[0].kind, rows[0].from_offset, rows[0].to_offset),
        (TruncationKind::Truncated, at, end)
    );
    // The catalog holds nothing installed from the cut segment on: it is the active one again.
    let row = catalog
        .partition(&segmirror_catalog::PartitionKey::new(LINK, TOPIC, 0))
        .expect("partition");
    assert!(catalog.installed_segments(row.id).expect("segments").is_empty());
    assert_eq!(row.installed_end_offset, Some(*base0));
}
