//! Several shippers on one link (feature bit 6) over loopback TCP: one session per node id at once (a second of the
//! same node is refused `Busy`); a partition is shipped only after a granted Claim; a higher leader epoch displaces
//! the holder, whose session gets a Revoke and whose chunks still in flight are discarded unapplied; the new holder
//! continues exactly from the granted position, so every byte lands once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use segmirror_transport::direct::handshake::HandshakeConfig;
use segmirror_transport::direct::session::link::{dial, listen_cluster, Acceptor, Dialer, LinkConfig};
use segmirror_transport::direct::session::{
    ChunkApplier, ChunkFeed, ClaimDecision, Cluster, DurablePosition, FeedItem, ShipperSession, ShipperStats,
};
use segmirror_transport::direct::{
    handshake, Chunk, Claim, ClaimResult, ClaimVerdict, DirectError, Frame, LogStart, PartitionRef, Position,
    RefuseReason, Revoke, Role, Roll, SegmentReplace, SegmentSeal, SourceProgress, TruncateMode,
};
use support::session::*;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

mod support;

/// Chunks of the one partition these tests ship.
const CHUNKS: usize = 20;

/// A failure guard only; nothing is asserted about speed.
const GIVE_UP: Duration = Duration::from_secs(60);

fn partition() -> PartitionRef {
    partitions(1).remove(0)
}

/// The partition's chunks: one segment, contiguous, bytes derived from the index.
fn chunks() -> Vec<Chunk> {
    let mut out = Vec::new();
    let mut position = 0u64;
    for i in 0..CHUNKS {
        let bytes: Vec<u8> = (0..(300 + i * 13)).map(|k| (k * 7 + i * 31) as u8).collect();
        out.push(Chunk {
            partition: partition(),
            segment_base: 0,
            position,
            bytes: Bytes::from(bytes),
            crcs: Default::default(),
        });
        position += out[i].bytes.len() as u64;
    }
    out
}

/// What a feed saw from its session.
#[derive(Debug, Default)]
struct Seen {
    results: Vec<ClaimResult>,
    revokes: Vec<Revoke>,
}

/// One shipper's feed: sends the claims the test pushes, and once granted the chunks from the granted position,
/// at most `limit` of them (the test raises it).
struct ClaimFeed {
    chunks: Vec<Chunk>,
    cursor: usize,
    granted: bool,
    claims: mpsc::UnboundedReceiver<Claim>,
    limit: watch::Receiver<usize>,
    seen: Arc<Mutex<Seen>>,
}

impl ChunkFeed for ClaimFeed {
    async fn seek(&mut self, resume: &[Position]) -> Result<(), DirectError> {
        assert!(resume.is_empty(), "a cluster session resumes nothing: {resume:?}");
        self.granted = false;
        Ok(())
    }

    async fn next(&mut self) -> Result<FeedItem, DirectError> {
        let (granted, cursor) = (self.granted, self.cursor);
        let limit = &mut self.limit;
        tokio::select! {
            Some(claim) = self.claims.recv() => Ok(FeedItem::Claim(claim)),
            r = limit.wait_for(|l| granted && cursor < *l && cursor < CHUNKS) => {
                r.map_err(|_| DirectError::Local { what: "test feed", source: "limit dropped".into() })?;
                self.cursor += 1;
                Ok(FeedItem::Chunk(self.chunks[cursor].clone()))
            }
        }
    }

    fn claim_result(&mut self, result: &ClaimResult) {
        self.seen.lock().unwrap().results.push(result.clone());
        match result.resume_position() {
            Some(p) => {
                self.granted = true;
                self.cursor = self
                    .chunks
                    .iter()
                    .position(|c| c.position == p.position)
                    .unwrap_or(self.chunks.len());
            }
            None => {
                self.granted = matches!(result.verdict, ClaimVerdict::Granted { .. });
                self.cursor = 0;
            }
        }
    }

    fn revoked(&mut self, revoke: &Revoke) {
        self.seen.lock().unwrap().revokes.push(revoke.clone());
        self.granted = false;
    }
}

/// The memory applier with the epoch rule (its "durable" record shared, as a restart would read it back).
struct ClaimMem {
    inner: MemApplier,
    claims: Arc<Mutex<HashMap<PartitionRef, (i32, i32)>>>,
}

impl ChunkApplier for ClaimMem {
    async fn durable_positions(&mut self) -> Result<Vec<DurablePosition>, DirectError> {
        self.inner.durable_positions().await
    }
    async fn apply_chunk(&mut self, chunk: &Chunk) -> Result<(), DirectError> {
        self.inner.apply_chunk(chunk).await
    }
    async fn check_applied(&mut self, chunk: &Chunk) -> Result<(), DirectError> {
        self.inner.check_applied(chunk).await
    }
    async fn apply_seal(&mut self, seal: &SegmentSeal) -> Result<(), DirectError> {
        self.inner.apply_seal(seal).await
    }
    async fn apply_log_start(&mut self, l: &LogStart) -> Result<(), DirectError> {
        self.inner.apply_log_start(l).await
    }
    async fn apply_replace(&mut self, r: &SegmentReplace) -> Result<(), DirectError> {
        self.inner.apply_replace(r).await
    }
    async fn apply_progress(&mut self, p: &SourceProgress, upto: TruncateMode) -> Result<(), DirectError> {
        self.inner.apply_progress(p, upto).await
    }
    async fn apply_roll(&mut self, r: &Roll) -> Result<(), DirectError> {
        self.inner.apply_roll(r).await
    }
    async fn claim(&mut self, node: i32, claim: &Claim) -> Result<ClaimDecision, DirectError> {
        let held = self.claims.lock().unwrap().get(&claim.partition).copied();
        if let Some((holder_node, holder_epoch)) = held {
            if !(claim.leader_epoch > holder_epoch || (claim.leader_epoch == holder_epoch && node == holder_node)) {
                return Ok(ClaimDecision::Refused {
                    holder_node,
                    holder_epoch,
                });
            }
        }
        self.claims
            .lock()
            .unwrap()
            .insert(claim.partition.clone(), (node, claim.leader_epoch));
        let durable = self
            .inner
            .durable_positions()
            .await?
            .into_iter()
            .find(|d| d.position.partition == claim.partition);
        Ok(ClaimDecision::Granted {
            durable,
            end_offset: 0,
            last_batch_crc: None,
        })
    }
}

struct Shipper {
    claims: mpsc::UnboundedSender<Claim>,
    limit: watch::Sender<usize>,
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<(ShipperStats, Result<(), DirectError>)>,
}

fn start_shipper(addr: String, node: i32, shutdown: &CancellationToken) -> Shipper {
    let (claims, claims_rx) = mpsc::unbounded_channel();
    let (limit, limit_rx) = watch::channel(0);
    let seen = Arc::new(Mutex::new(Seen::default()));
    let feed = ClaimFeed {
        chunks: chunks(),
        cursor: 0,
        granted: false,
        claims: claims_rx,
        limit: limit_rx,
        seen: seen.clone(),
    };
    let mut handshake = HandshakeConfig::cluster_shipper(LINK, CLUSTER.into(), node);
    handshake.timeout = Duration::from_secs(2);
    let config = LinkConfig::new(handshake);
    let mut session = ShipperSession::new(feed, session_config(4096)).unwrap();
    let shutdown = shutdown.clone();
    let task = tokio::spawn(async move {
        let r = dial(&addr, &Dialer::Plain, &config, &mut session, &shutdown).await;
        (session.stats().clone(), r)
    });
    Shipper {
        claims,
        limit,
        seen,
        task,
    }
}

fn claim(epoch: i32) -> Claim {
    Claim {
        partition: partition(),
        leader_epoch: epoch,
    }
}

/// Waits until `f` holds of the seen notifications.
async fn wait_seen(s: &Shipper, f: impl Fn(&Seen) -> bool) {
    while !f(&s.seen.lock().unwrap()) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn wait_bytes(progress: &mut Progress, bytes: u64) {
    progress.wait_for(|(b, _)| *b >= bytes).await.unwrap();
}

struct Applier {
    addr: String,
    cluster: Cluster<ClaimMem>,
    state: Arc<Mutex<MemState>>,
    progress: Progress,
    task: tokio::task::JoinHandle<Result<(), DirectError>>,
}

async fn start_applier(gate: Option<watch::Receiver<bool>>, shutdown: &CancellationToken) -> Applier {
    let (inner, state, progress) = MemApplier::new(gate);
    let cluster = Cluster::new(ClaimMem {
        inner,
        claims: Arc::default(),
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let mut handshake = HandshakeConfig::cluster_applier(LINK, None);
    handshake.timeout = Duration::from_secs(2);
    let task = tokio::spawn(listen_cluster(
        listener,
        Acceptor::Plain,
        LinkConfig::new(handshake),
        cluster.clone(),
        session_config(4096),
        shutdown.clone(),
    ));
    Applier {
        addr,
        cluster,
        state,
        progress,
        task,
    }
}

fn total_bytes() -> u64 {
    chunks().iter().map(|c| c.bytes.len() as u64).sum()
}

fn expected_bytes() -> Vec<u8> {
    chunks().iter().flat_map(|c| c.bytes.to_vec()).collect()
}

#[tokio::test]
async fn claims_by_epoch_hand_a_partition_over_and_every_byte_lands_once() {
    tokio::time::timeout(GIVE_UP, async {
        let shutdown = CancellationToken::new();
        let mut applier = start_applier(None, &shutdown).await;
        let one = start_shipper(applier.addr.clone(), 1, &shutdown);
        let two = start_shipper(applier.addr.clone(), 2, &shutdown);

        // Node 1 leads at epoch 1 and ships half.
        one.claims.send(claim(1)).unwrap();
        wait_seen(&one, |s| s.results.len() == 1).await;
        assert!(matches!(
            one.seen.lock().unwrap().results[0].verdict,
            ClaimVerdict::Granted { durable: None }
        ));
        one.limit.send_replace(CHUNKS / 2);
        let half: u64 = chunks()[..CHUNKS / 2].iter().map(|c| c.bytes.len() as u64).sum();
        wait_bytes(&mut applier.progress, half).await;

        // Node 2 at the same epoch: refused, naming node 1.
        two.claims.send(claim(1)).unwrap();
        wait_seen(&two, |s| s.results.len() == 1).await;
        assert_eq!(
            two.seen.lock().unwrap().results[0].verdict,
            ClaimVerdict::Refused {
                holder_node: 1,
                holder_epoch: 1
            }
        );
        // Node 2 becomes the leader at epoch 2: granted at the mirror's end; node 1 is revoked.
        two.claims.send(claim(2)).unwrap();
        wait_seen(&two, |s| s.results.len() == 2).await;
        let granted = two.seen.lock().unwrap().results[1]
            .resume_position()
            .expect("granted at a position");
        assert_eq!((granted.segment_base, granted.position), (0, half));
        wait_seen(&one, |s| !s.revokes.is_empty()).await;
        assert_eq!(
            one.seen.lock().unwrap().revokes[0],
            Revoke {
                partition: partition(),
                holder_node: 2,
                holder_epoch: 2
            }
        );
        assert_eq!(applier.cluster.holder(&partition()).await, Some((2, 2)));

        // Both may now ship everything: only node 2 does.
        one.limit.send_replace(CHUNKS);
        two.limit.send_replace(CHUNKS);
        wait_bytes(&mut applier.progress, total_bytes()).await;
        // Node 1 comes back with its old epoch: refused, naming node 2.
        one.claims.send(claim(1)).unwrap();
        wait_seen(&one, |s| s.results.len() == 2).await;
        assert_eq!(
            one.seen.lock().unwrap().results[1].verdict,
            ClaimVerdict::Refused {
                holder_node: 2,
                holder_epoch: 2
            }
        );

        // A second session of node 2 is refused Busy while the first runs.
        let mut config = HandshakeConfig::cluster_shipper(LINK, CLUSTER.into(), 2);
        config.timeout = Duration::from_secs(2);
        let tcp = TcpStream::connect(&applier.addr).await.unwrap();
        let (mut framed, _) = handshake(tcp, &config).await.expect("the handshake itself succeeds");
        match framed.next().await {
            Some(Ok(Frame::Refuse(r))) => {
                assert_eq!(r.reason, RefuseReason::Busy);
                assert!(r.message.contains("node 2"), "{}", r.message);
            }
            other => panic!("expected Refuse(Busy), got {other:?}"),
        }

        // A shipper without a node id is refused by the handshake (bit 6 required).
        let mut plain = HandshakeConfig::new(Role::Shipper, LINK, Some(CLUSTER.into()));
        plain.timeout = Duration::from_secs(2);
        let tcp = TcpStream::connect(&applier.addr).await.unwrap();
        match handshake(tcp, &plain).await {
            // Whichever side refuses first: the shipper reads the applier's required bit 6 in its Hello.
            Err(DirectError::RefusedByPeer {
                reason: RefuseReason::Features,
                ..
            })
            | Err(DirectError::Refused {
                reason: RefuseReason::Features,
                ..
            }) => {}
            Err(e) => panic!("expected a Features refusal, got {e}"),
            Ok(_) => panic!("expected a Features refusal, got a session"),
        }

        shutdown.cancel();
        one.task.await.unwrap().1.unwrap();
        two.task.await.unwrap().1.unwrap();
        applier.task.await.unwrap().unwrap();
        let state = applier.state.lock().unwrap();
        let segs = &state.parts[&partition()];
        assert_eq!(segs.len(), 1);
        assert_eq!(segs[0].bytes, expected_bytes(), "every byte once, in order");
        assert_eq!(state.applied_chunks, CHUNKS as u64, "no chunk applied twice");
    })
    .await
    .expect("gave up");
}

#[tokio::test]
async fn a_revoke_mid_flight_discards_the_old_holders_chunks_unapplied() {
    tokio::time::timeout(GIVE_UP, async {
        let shutdown = CancellationToken::new();
        // The disk stalls: node 1's first apply waits under the mirror's lock, its other chunks queue behind it.
        let (gate, gate_rx) = watch::channel(false);
        let mut applier = start_applier(Some(gate_rx), &shutdown).await;
        // Node 2's session is up (its start takes the mirror's lock too) before anything stalls.
        let two = start_shipper(applier.addr.clone(), 2, &shutdown);
        two.claims.send(claim(3)).unwrap();
        wait_seen(&two, |s| s.results.len() == 1).await;
        let one = start_shipper(applier.addr.clone(), 1, &shutdown);
        one.claims.send(claim(4)).unwrap();
        wait_seen(&one, |s| s.results.len() == 1).await;
        wait_seen(&two, |s| !s.revokes.is_empty()).await;
        // Node 1's first chunk stalls in the applier under the mirror's lock; the next ones (as many as the 4096
        // bytes of credit allow) wait behind it in the connection.
        one.limit.send_replace(1);
        tokio::time::sleep(Duration::from_millis(300)).await;
        one.limit.send_replace(CHUNKS);
        tokio::time::sleep(Duration::from_millis(300)).await;

        // Node 2's claim at a higher epoch waits for that lock; then the disk comes back.
        two.claims.send(claim(5)).unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        gate.send_replace(true);
        wait_seen(&two, |s| s.results.len() == 2).await;
        wait_seen(&one, |s| !s.revokes.is_empty()).await;
        let granted = two.seen.lock().unwrap().results[1].resume_position();
        let at = granted.map_or(0, |p| p.position);
        // What node 1 got applied ends exactly where node 2 was granted: nothing of node 1 after the grant.
        assert_eq!(applier.state.lock().unwrap().applied_bytes, at);
        assert!(
            at < total_bytes(),
            "node 1 shipped everything before the grant; the test proves nothing"
        );
        two.limit.send_replace(CHUNKS);
        wait_bytes(&mut applier.progress, total_bytes()).await;

        shutdown.cancel();
        // Node 1's session survived the discards (its link ends only with the shutdown, cleanly), and it had sent
        // more than was applied of it: those chunks were in flight at the grant and were discarded.
        let (stats, r) = one.task.await.unwrap();
        r.unwrap();
        assert!(
            stats.bytes_sent > at,
            "node 1 sent {} bytes, {at} applied",
            stats.bytes_sent
        );
        assert_eq!(stats.sessions, 1, "node 1's session never ended: {stats:?}");
        two.task.await.unwrap().1.unwrap();
        applier.task.await.unwrap().unwrap();
        let state = applier.state.lock().unwrap();
        assert_eq!(
            state.parts[&partition()][0].bytes,
            expected_bytes(),
            "every byte once, in order"
        );
        assert_eq!(state.applied_bytes, total_bytes(), "no fenced byte appended");
    })
    .await
    .expect("gave up");
}
