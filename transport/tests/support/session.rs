//! A deterministic chunk feed and an in-memory chunk applier for session tests.
//!
//! The feed produces, per partition, segments of chunks with bytes derived from
//! (partition, byte index), each segment ending in a SegmentSeal; it can seek to
//! any item boundary, as the tail driver will. The applier keeps each
//! partition's segments as byte vectors and checks every call against what it
//! holds, so a session bug shows up as an error or a wrong byte, never silently.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use segmirror_transport::direct::handshake::DEFAULT_HANDSHAKE_TIMEOUT;
use segmirror_transport::direct::session::link::{Backoff, LinkConfig, LinkEvent};
use segmirror_transport::direct::session::{ChunkApplier, ChunkFeed, DurablePosition, FeedItem, SessionConfig};
use segmirror_transport::direct::{
    Chunk, Companion, CompanionKind, DirectError, HandshakeConfig, PartitionRef, Position, Role, SegmentSeal,
};
use tokio::sync::{mpsc, watch};

pub const LINK: &str = "dr";
pub const CLUSTER: &str = "cluster-A";

pub fn partitions(n: usize) -> Vec<PartitionRef> {
    (0..n)
        .map(|i| PartitionRef {
            topic: "orders".into(),
            partition: i as i32,
            topic_id: [7; 16],
        })
        .collect()
}

/// Short heartbeats and idle timeout, so cuts are noticed within a second.
pub fn session_config(window: u64) -> SessionConfig {
    SessionConfig {
        heartbeat_interval: Duration::from_millis(50),
        idle_timeout: Duration::from_millis(1000),
        credit_window: window,
        max_bandwidth: None,
        observer: None,
    }
}

pub fn handshake_config(role: Role, link: &str) -> HandshakeConfig {
    let mut config = HandshakeConfig::new(role, link, (role == Role::Shipper).then(|| CLUSTER.to_string()));
    config.timeout = Duration::from_secs(2).min(DEFAULT_HANDSHAKE_TIMEOUT);
    config
}

/// Fast backoff, a long refusal pause, events into a roomy channel.
pub fn link_config(role: Role, link: &str) -> (LinkConfig, mpsc::Receiver<LinkEvent>) {
    let (tx, rx) = mpsc::channel(4096);
    let mut config = LinkConfig::new(handshake_config(role, link));
    config.backoff = Backoff::new(
        Duration::from_millis(10),
        Duration::from_millis(200),
        Duration::from_secs(60),
    );
    config.refusal_pause = Duration::from_secs(3600);
    config.tls_timeout = Duration::from_secs(2);
    config.events = Some(tx);
    (config, rx)
}

fn byte(partition: usize, index: u64) -> u8 {
    (index.wrapping_mul(31) ^ (index >> 7) ^ (partition as u64 * 0x5b)) as u8
}

/// One expected segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub base: i64,
    pub bytes: Vec<u8>,
    pub sealed: bool,
}

/// A feed of `chunks` chunks per partition, `per_segment` chunks per segment, every segment sealed.
pub struct TestFeed {
    items: Vec<Vec<FeedItem>>,
    cursor: Vec<usize>,
    turn: usize,
    /// Payload bytes handed to the session so far.
    pub yielded: Arc<AtomicU64>,
    pub expected: HashMap<PartitionRef, Vec<Segment>>,
}

impl TestFeed {
    pub fn new(parts: &[PartitionRef], chunks: usize, per_segment: usize) -> TestFeed {
        let mut items = Vec::new();
        let mut expected = HashMap::new();
        for (pi, p) in parts.iter().enumerate() {
            let mut list = Vec::new();
            let mut segments = Vec::new();
            let mut index = 0u64;
            for s in 0..chunks.div_ceil(per_segment) {
                let base = (s * 1000) as i64;
                let mut seg = Vec::new();
                for c in 0..per_segment.min(chunks - s * per_segment) {
                    let len = 512 + ((c * 7919 + s * 104_729 + pi * 31) % 3584);
                    let bytes: Vec<u8> = (0..len as u64).map(|k| byte(pi, index + k)).collect();
                    index += len as u64;
                    list.push(FeedItem::Chunk(Chunk {
                        partition: p.clone(),
                        segment_base: base,
                        position: seg.len() as u64,
                        bytes: Bytes::from(bytes.clone()),
                        crcs: Default::default(),
                    }));
                    seg.extend_from_slice(&bytes);
                }
                let snapshot = Bytes::from(vec![s as u8; 40]);
                list.push(FeedItem::Seal(SegmentSeal {
                    partition: p.clone(),
                    segment_base: base,
                    final_size: seg.len() as u64,
                    log_sha256: [0; 32],
                    companions: vec![Companion {
                        kind: CompanionKind::ProducerSnapshot,
                        size: snapshot.len() as u64,
                        sha256: [1; 32],
                        inline: Some(snapshot),
                        index_interval: None,
                    }],
                }));
                segments.push(Segment {
                    base,
                    bytes: seg,
                    sealed: true,
                });
            }
            items.push(list);
            expected.insert(p.clone(), segments);
        }
        TestFeed {
            cursor: vec![0; items.len()],
            items,
            turn: 0,
            yielded: Arc::new(AtomicU64::new(0)),
            expected,
        }
    }

    /// Every seal carries `companions` instead of the default snapshot.
    pub fn with_seal_companions(mut self, companions: Vec<Companion>) -> TestFeed {
        for item in self.items.iter_mut().flatten() {
            if let FeedItem::Seal(seal) = item {
                seal.companions = companions.clone();
            }
        }
        self
    }

    pub fn total_bytes(&self) -> u64 {
        self.expected.values().flatten().map(|s| s.bytes.len() as u64).sum()
    }

    pub fn total_seals(&self) -> u64 {
        self.expected.values().map(|s| s.len() as u64).sum()
    }

    pub fn total_chunks(&self) -> u64 {
        self.items
            .iter()
            .flatten()
            .filter(|i| matches!(i, FeedItem::Chunk(_)))
            .count() as u64
    }
}

fn start_of(item: &FeedItem) -> Option<(i64, u64)> {
    match item {
        FeedItem::Chunk(c) => Some((c.segment_base, c.position)),
        FeedItem::Seal(s) => Some((s.segment_base, s.final_size)),
        FeedItem::Roll(r) => Some((r.segment_base, r.final_size)),
        FeedItem::LogStart(_)
        | FeedItem::Replace(_)
        | FeedItem::Progress(_)
        | FeedItem::Claim(_)
        | FeedItem::Truncate(_) => None,
    }
}

impl ChunkFeed for TestFeed {
    async fn seek(&mut self, resume: &[Position]) -> Result<(), DirectError> {
        for (i, list) in self.items.iter().enumerate() {
            let partition = list[0].partition();
            self.cursor[i] = match resume.iter().find(|p| &p.partition == partition) {
                None => 0,
                Some(p) => list
                    .iter()
                    .position(|item| start_of(item) == Some((p.segment_base, p.position)))
                    .ok_or_else(|| DirectError::Local {
                        what: "test feed",
                        source: format!("resume at {p:?} is not an item boundary").into(),
                    })?,
            };
        }
        Ok(())
    }

    async fn next(&mut self) -> Result<FeedItem, DirectError> {
        for _ in 0..self.items.len() {
            let i = self.turn % self.items.len();
            self.turn += 1;
            if let Some(item) = self.items[i].get(self.cursor[i]) {
                self.cursor[i] += 1;
                let cost = match item {
                    FeedItem::Chunk(c) => c.bytes.len() as u64,
                    FeedItem::Seal(_)
                    | FeedItem::LogStart(_)
                    | FeedItem::Progress(_)
                    | FeedItem::Claim(_)
                    | FeedItem::Roll(_)
                    | FeedItem::Truncate(_) => 0,
                    FeedItem::Replace(r) => r.bytes.len() as u64,
                };
                self.yielded.fetch_add(cost, Ordering::SeqCst);
                return Ok(item.clone());
            }
        }
        // Everything shipped: a tail waits for more.
        std::future::pending().await
    }
}

/// What the in-memory applier holds and has done.
#[derive(Debug, Default)]
pub struct MemState {
    pub parts: HashMap<PartitionRef, Vec<Segment>>,
    pub applied_chunks: u64,
    pub applied_bytes: u64,
    pub seals: u64,
    pub checked: u64,
}

/// Progress: (applied bytes, seals).
pub type Progress = watch::Receiver<(u64, u64)>;

pub struct MemApplier {
    pub state: Arc<Mutex<MemState>>,
    progress: watch::Sender<(u64, u64)>,
    /// While it holds `false`, apply_chunk waits (a stalled disk).
    gate: Option<watch::Receiver<bool>>,
}

impl MemApplier {
    pub fn new(gate: Option<watch::Receiver<bool>>) -> (MemApplier, Arc<Mutex<MemState>>, Progress) {
        let state = Arc::new(Mutex::new(MemState::default()));
        let (progress, rx) = watch::channel((0, 0));
        (
            MemApplier {
                state: state.clone(),
                progress,
                gate,
            },
            state,
            rx,
        )
    }
}

fn fail(reason: String) -> DirectError {
    DirectError::Local {
        what: "memory applier",
        source: reason.into(),
    }
}

impl ChunkApplier for MemApplier {
    async fn durable_positions(&mut self) -> Result<Vec<DurablePosition>, DirectError> {
        let state = self.state.lock().expect("lock");
        Ok(state
            .parts
            .iter()
            .filter_map(|(p, segs)| {
                segs.last().map(|s| DurablePosition {
                    position: Position {
                        partition: p.clone(),
                        segment_base: s.base,
                        position: s.bytes.len() as u64,
                    },
                    sealed: s.sealed,
                })
            })
            .collect())
    }

    async fn apply_chunk(&mut self, chunk: &Chunk) -> Result<(), DirectError> {
        if let Some(gate) = self.gate.as_mut() {
            gate.wait_for(|open| *open)
                .await
                .map_err(|_| fail("gate dropped".into()))?;
        }
        let mut state = self.state.lock().expect("lock");
        let segs = state.parts.entry(chunk.partition.clone()).or_default();
        match segs.last_mut() {
            Some(last) if last.base == chunk.segment_base => {
                if last.sealed || last.bytes.len() as u64 != chunk.position {
                    return Err(fail(format!("chunk at {} on {last:?}", chunk.position)));
                }
                last.bytes.extend_from_slice(&chunk.bytes);
            }
            last => {
                if chunk.position != 0 || last.is_some_and(|l| !l.sealed || l.base > chunk.segment_base) {
                    return Err(fail(format!(
                        "new segment {} at {}",
                        chunk.segment_base, chunk.position
                    )));
                }
                segs.push(Segment {
                    base: chunk.segment_base,
                    bytes: chunk.bytes.to_vec(),
                    sealed: false,
                });
            }
        }
        state.applied_chunks += 1;
        state.applied_bytes += chunk.bytes.len() as u64;
        self.progress.send_replace((state.applied_bytes, state.seals));
        Ok(())
    }

    async fn check_applied(&mut self, chunk: &Chunk) -> Result<(), DirectError> {
        let mut state = self.state.lock().expect("lock");
        state.checked += 1;
        let seg = state
            .parts
            .get(&chunk.partition)
            .and_then(|segs| segs.iter().find(|s| s.base == chunk.segment_base))
            .ok_or_else(|| fail("resent chunk of an unknown segment".into()))?;
        let start = chunk.position as usize;
        if seg.bytes.get(start..start + chunk.bytes.len()) != Some(&chunk.bytes[..]) {
            return Err(fail(format!("resent chunk at {start} differs from the bytes applied")));
        }
        Ok(())
    }

    async fn apply_seal(&mut self, seal: &SegmentSeal) -> Result<(), DirectError> {
        let mut state = self.state.lock().expect("lock");
        let last = state
            .parts
            .get_mut(&seal.partition)
            .and_then(|segs| segs.last_mut())
            .filter(|s| s.base == seal.segment_base && s.bytes.len() as u64 == seal.final_size && !s.sealed)
            .ok_or_else(|| fail(format!("seal of {} at {}", seal.segment_base, seal.final_size)))?;
        last.sealed = true;
        state.seals += 1;
        self.progress.send_replace((state.applied_bytes, state.seals));
        Ok(())
    }
}
