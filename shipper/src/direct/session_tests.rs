//! The tail feed through a real `ShipperSession` over loopback TCP into an
//! in-memory applier, across a shipper restart: the mirror ends up with the
//! source's segments byte for byte, each sealed with a matching SHA-256.

use std::collections::BTreeMap;
use std::sync::Mutex;

use segmirror_transport::direct::handshake::{handshake, HandshakeConfig};
use segmirror_transport::direct::payload::{Chunk, SegmentSeal};
use segmirror_transport::direct::session::{
    ApplierSession, BoxIo, ChunkApplier, DurablePosition, SessionConfig, SessionEnd, ShipperSession,
};
use segmirror_transport::direct::Role;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::tests::{append, batch_at, feed, partition, sha256};
use super::*;

/// The mirror: per segment its bytes and whether it is sealed.
#[derive(Default)]
struct Mirror {
    segments: BTreeMap<i64, (Vec<u8>, bool)>,
}

struct MemApplier {
    mirror: Arc<Mutex<Mirror>>,
    progress: watch::Sender<u64>,
}

fn refuse(reason: String) -> DirectError {
    DirectError::Local {
        what: "test applier",
        source: reason.into(),
    }
}

impl ChunkApplier for MemApplier {
    async fn durable_positions(&mut self) -> std::result::Result<Vec<DurablePosition>, DirectError> {
        let mirror = self.mirror.lock().unwrap();
        Ok(mirror
            .segments
            .iter()
            .next_back()
            .map(|(&base, (bytes, sealed))| DurablePosition {
                position: Position {
                    partition: partition(),
                    segment_base: base,
                    position: bytes.len() as u64,
                },
                sealed: *sealed,
            })
            .into_iter()
            .collect())
    }

    async fn apply_chunk(&mut self, chunk: &Chunk) -> std::result::Result<(), DirectError> {
        let mut mirror = self.mirror.lock().unwrap();
        let (bytes, sealed) = mirror.segments.entry(chunk.segment_base).or_default();
        if *sealed || chunk.position != bytes.len() as u64 {
            return Err(refuse(format!("chunk at {} of {}", chunk.position, chunk.segment_base)));
        }
        bytes.extend_from_slice(&chunk.bytes);
        let total = mirror.segments.values().map(|(b, _)| b.len() as u64).sum();
        self.progress.send_replace(total);
        Ok(())
    }

    async fn check_applied(&mut self, chunk: &Chunk) -> std::result::Result<(), DirectError> {
        let mirror = self.mirror.lock().unwrap();
        let from = chunk.position as usize;
        let same = mirror
            .segments
            .get(&chunk.segment_base)
            .and_then(|(b, _)| b.get(from..from + chunk.bytes.len()))
            .is_some_and(|b| b == &chunk.bytes[..]);
        if same {
            Ok(())
        } else {
            Err(refuse("a resend differs".into()))
        }
    }

    async fn apply_seal(&mut self, seal: &SegmentSeal) -> std::result::Result<(), DirectError> {
        let mut mirror = self.mirror.lock().unwrap();
        let Some((bytes, sealed)) = mirror.segments.get_mut(&seal.segment_base) else {
            return Err(refuse("seal of an unknown segment".into()));
        };
        if bytes.len() as u64 != seal.final_size || sha256(bytes) != seal.log_sha256 {
            return Err(refuse("seal does not match the bytes".into()));
        }
        *sealed = true;
        Ok(())
    }
}

fn session_config() -> SessionConfig {
    SessionConfig {
        heartbeat_interval: Duration::from_millis(50),
        idle_timeout: Duration::from_secs(5),
        credit_window: 16 << 10,
        max_bandwidth: None,
        observer: None,
    }
}

/// One session: a fresh feed (a restarted shipper) until the mirror holds `total` bytes.
async fn run_session(dir: &Path, mirror: &Arc<Mutex<Mirror>>, total: u64) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accept = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        handshake(
            Box::new(tcp) as BoxIo,
            &HandshakeConfig::new(Role::Applier, "tail", None),
        )
        .await
    });
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (s_framed, s_session) = handshake(
        Box::new(tcp) as BoxIo,
        &HandshakeConfig::new(Role::Shipper, "tail", Some("source".into())),
    )
    .await
    .unwrap();
    let (a_framed, a_session) = accept.await.unwrap().unwrap();

    let (progress, mut seen) = watch::channel(0u64);
    let applier = MemApplier {
        mirror: mirror.clone(),
        progress,
    };
    let mut applier = ApplierSession::new(applier, session_config()).unwrap();
    let mut shipper = ShipperSession::new(feed(dir, UptoPolicy::LogEnd, None, 3000), session_config()).unwrap();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let a = tokio::spawn(async move { applier.run(a_framed, &a_session, &stop).await });
    let stop = shutdown.clone();
    let s = tokio::spawn(async move { shipper.run(s_framed, &s_session, &stop).await });
    seen.wait_for(|&bytes| bytes >= total).await.unwrap();
    shutdown.cancel();
    assert_eq!(s.await.unwrap().unwrap(), SessionEnd::Shutdown);
    let _ = a.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_through_a_session_mirrors_every_byte_across_a_restart() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("events-0");
    std::fs::create_dir_all(&dir).unwrap();
    let mut offset = 0i64;
    let mut bases = Vec::new();
    let write = |base: i64, n: usize, offset: &mut i64| {
        for i in 0..n {
            append(&log_path(&dir, base), &batch_at(*offset, 2, i));
            *offset += 2;
        }
    };
    for _ in 0..2 {
        bases.push(offset);
        write(offset, 12, &mut offset);
    }
    let active = offset;
    bases.push(active);
    write(active, 6, &mut offset);
    let size = |dir: &Path| -> u64 {
        bases
            .iter()
            .map(|&b| std::fs::metadata(log_path(dir, b)).unwrap().len())
            .sum()
    };
    let first_total = size(&dir);

    let mirror = Arc::new(Mutex::new(Mirror::default()));
    run_session(&dir, &mirror, first_total / 2).await;
    // More appended while no shipper runs; the next one resumes from the mirror.
    write(active, 9, &mut offset);
    run_session(&dir, &mirror, size(&dir)).await;

    let mirror = mirror.lock().unwrap();
    for &base in &bases {
        let (bytes, sealed) = &mirror.segments[&base];
        assert_eq!(bytes, &std::fs::read(log_path(&dir, base)).unwrap(), "segment {base}");
        assert_eq!(*sealed, base != active, "segment {base} sealed");
    }
    assert_eq!(mirror.segments.len(), bases.len());
}
