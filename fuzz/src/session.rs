//! `direct_session`: the applier's side of a direct session, over the real mirror appender, fed whatever a peer
//! that completed a valid handshake sends.
//!
//! Why: a handshake proves little (anyone completes one against `--plaintext`), so every frame after it is as
//! hostile as the frame decoder's input (`direct_frames`), and here it reaches the code that acts on it: the
//! session's order and credit rules, the appender's checks of batches, seals, log starts, replacements,
//! truncations, claims and rolls, the catalog records. The contract (`docs/direct-protocol.md` §7, the project's
//! rules): bad bytes from the peer end *that session*, never the process, and never lose or corrupt what the
//! mirror holds.
//!
//! The input is a small program, not raw frames, so the fuzzer reaches the deep paths: a 3-byte header (features
//! the shipper offers, credit window, how the stream ends) and then 10-byte operations, each of which becomes one
//! frame encoded with the transport's own encoder ([`frame::encode`]), with fields derived from a model of what
//! the mirror should hold (so a chunk is usually the next one, with real Kafka batches built by
//! `segment_format`'s [`BatchBuilder`]) and perturbed by the operation's bytes (offsets back, gaps, bad CRCs,
//! wrong digests, hostile topic names, impossible log starts), plus raw bytes, arbitrary frames with a valid
//! CRC, frames the applier never expects, and pauses. See [`Op`] for the layout.
//!
//! Each run: a fresh mirror root and SQLite catalog under `/dev/shm` (tmpfs: fsyncs cost nothing), a handshake
//! over an in-memory pipe, [`ApplierSession::run`] over [`TailAppender::open_with_catalog`] as `segmirror
//! tail-apply` wires it, on one current-thread runtime with paused time (idle timeouts and heartbeats pass
//! instantly, yet in order) that lives across runs. Properties, each a finding when it fails:
//! - the session returns within [`SESSION_BOUND`] of virtual time (no hang);
//! - no panic (a panic in the appender's blocking task counts too);
//! - an error it returns is never [`ErrorClass::Local`] (that class stops the listening applier) unless the
//!   appender's own disk failed (an I/O error of a disk-failure kind in the error's chain);
//! - afterwards the mirror root reopens: [`TailAppender::open`] and [`ChunkApplier::durable_positions`] succeed.
//!
//! `DIRECT_SESSION_LOCAL=report` in the environment prints the first Local error of each kind (once) instead of
//! failing on it: for surveying the classification while it is being changed.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use segment_format::batch::Compression;
use segment_format::record::{BatchBuilder, RecordSpec};
use segmirror_applier::direct::{TailAppender, TailCatalog};
use segmirror_catalog::Catalog;
use segmirror_transport::bucket::link_meta::{GroupOffset, LinkMeta, TopicMeta};
use segmirror_transport::direct::error::{DirectError, ErrorClass};
use segmirror_transport::direct::frame::{self, Frame, HEADER_LEN, MAX_PAYLOAD_LEN};
use segmirror_transport::direct::handshake::{
    handshake, HandshakeConfig, FEATURE_CLUSTER_SHIPPERS, FEATURE_INDEX_INTERVAL, FEATURE_LINK_META, FEATURE_LOG_START,
    FEATURE_MIRROR_LAYOUT, FEATURE_PROGRESS_SHIPPED, FEATURE_SEGMENT_REPLACE, FEATURE_SOURCE_PROGRESS,
    FEATURE_TRUNCATE,
};
use segmirror_transport::direct::payload::{
    Chunk, Claim, ClaimResult, ClaimVerdict, Companion, CompanionKind, Goodbye, GoodbyeReason, Hello, HelloAck,
    LayoutSegment, LinkId, LinkMetaPiece, LogEnd, LogStart, MetaPart, MirrorLayout, PartitionRef, Position, Refuse,
    ReplaceEnd, Revoke, Roll, SegmentReplace, SegmentSeal, Shipped, SourceProgress, Truncate, TruncateMode,
};
use segmirror_transport::direct::session::{ApplierSession, BoxIo, ChunkApplier, SessionConfig};
use segmirror_transport::direct::{RefuseReason, Role};
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// The link both sides name.
pub const LINK: &str = "dr";
/// The shipper's source cluster id.
const CLUSTER_ID: &str = "MkU3OEVBNTcwNTJENDM2Qk";
/// Virtual time within which a session must end. The longest legitimate wait is the idle timeout (10 s) after
/// the last frame, plus the pauses the input asks for (at most 64 × 2.55 s).
pub const SESSION_BOUND: Duration = Duration::from_secs(600);
/// Bytes of one operation record.
pub const OP_LEN: usize = 10;
/// Operations run at most (the rest of a longer input is ignored).
pub const MAX_OPS: usize = 64;
/// Bytes of the header before the operations.
pub const HEADER: usize = 3;

/// The feature bits the header's first two bytes select, bit `i` of the little-endian `u16` for entry `i`.
/// Link ids are left out: they belong to the handshake (checked before the session starts).
const FEATURES: [u64; 9] = [
    FEATURE_LOG_START,
    FEATURE_SEGMENT_REPLACE,
    FEATURE_SOURCE_PROGRESS,
    FEATURE_INDEX_INTERVAL,
    FEATURE_PROGRESS_SHIPPED,
    FEATURE_CLUSTER_SHIPPERS,
    FEATURE_TRUNCATE,
    FEATURE_MIRROR_LAYOUT,
    FEATURE_LINK_META,
];

/// Credit windows the header's third byte selects (bits 0-1).
const CREDIT_WINDOWS: [u64; 4] = [4096, 64 << 10, 1 << 20, 64 << 20];

/// Partitions an operation names (its second byte, bits 0-2): two of one topic, the same partition under another
/// topic id (a topic deleted and recreated on the source), another topic, and four a peer may send but no source
/// has (`../orders` names, joined to a directory, the state file of `orders-0`).
fn partition(i: u8) -> PartitionRef {
    let (topic, partition, id): (&str, i32, u8) = match i & 7 {
        0 => ("orders", 0, 1),
        1 => ("orders", 1, 1),
        2 => ("orders", 0, 2),
        3 => ("logs.x_y-z", 7, 3),
        4 => ("", 0, 1),
        5 => ("..", 0, 1),
        6 => ("../orders", 0, 1),
        _ => ("orders", -1, 1),
    };
    PartitionRef {
        topic: topic.into(),
        partition,
        topic_id: [id; 16],
    }
}

fn sha256(bytes: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(bytes).into()
}

/// What the mirror should hold of one partition if every frame so far was accepted: where the next frame is
/// "right", which the operations perturb.
#[derive(Debug, Clone, Default)]
struct Model {
    base: i64,
    /// The active segment's bytes so far.
    bytes: Vec<u8>,
    /// (offset, position) of every batch of the active segment.
    batches: Vec<(i64, u64)>,
    next_offset: i64,
    sealed: bool,
    /// Sealed segments: base and bytes.
    sealed_segments: Vec<(i64, Vec<u8>)>,
    /// The last chunk sent, for resends.
    last: Option<Chunk>,
}

/// The decoded input: what the shipper offers, and the byte stream it writes.
#[derive(Debug, Clone)]
pub struct Plan {
    pub features: u64,
    pub credit_window: u64,
    /// Whether the shipper closes its side after the last piece (else it stays silent until the idle timeout).
    pub eof: bool,
    /// Shipper node id (offered only with the cluster feature).
    pub node: Option<i32>,
    /// The bytes to write and the pause after each piece.
    pub pieces: Vec<(Vec<u8>, Duration)>,
}

/// A byte reader that yields 0 past the end.
struct Bytes8<'a> {
    data: &'a [u8],
    at: usize,
}

impl Bytes8<'_> {
    fn u8(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    fn take(&mut self, n: usize) -> &[u8] {
        let from = self.at.min(self.data.len());
        let to = (self.at + n).min(self.data.len());
        self.at += n;
        &self.data[from..to]
    }
}

/// Operation codes (the first byte of an operation, modulo 16). The other nine bytes are `p` (partition in bits
/// 0-2) and `x0..x7`, whose meaning each builder documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    Chunk = 0,
    Seal = 1,
    LogStart = 2,
    Replace = 3,
    Truncate = 4,
    Progress = 5,
    LinkMeta = 6,
    Heartbeat = 7,
    Goodbye = 8,
    Claim = 9,
    Roll = 10,
    /// `x0` raw bytes follow the record, written as they are.
    Raw = 11,
    /// A frame of type `x0` (any value) with flags `x1`, an `x2`-byte payload that follows the record, and a
    /// valid CRC: the payload decoders' hostile input.
    AnyFrame = 12,
    /// A well-formed frame the applier never expects from a shipper (`x0` picks which).
    Unexpected = 13,
    /// Pause `x0` × 10 ms of (virtual) time before the next bytes.
    Pause = 14,
    /// The bytes so far are written at once; the next ones in a separate write.
    Flush = 15,
}

impl Plan {
    /// Decodes an input (any bytes are a plan).
    pub fn from_bytes(data: &[u8]) -> Plan {
        let mut r = Bytes8 { data, at: 0 };
        let mask = u16::from_le_bytes([r.u8(), r.u8()]);
        let features = FEATURES
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .fold(0, |acc, (_, f)| acc | f);
        let cfg = r.u8();
        let mut g = Generator {
            models: Default::default(),
            out: BytesMut::new(),
            pieces: Vec::new(),
        };
        let mut ops = 0;
        while r.at < data.len() && ops < MAX_OPS {
            ops += 1;
            let rec: [u8; OP_LEN] = std::array::from_fn(|_| r.u8());
            g.op(&rec, &mut r);
        }
        let rest = g.out.split().to_vec();
        g.pieces.push((rest, Duration::ZERO));
        Plan {
            features,
            credit_window: CREDIT_WINDOWS[usize::from(cfg & 3)],
            eof: cfg & 4 == 0,
            node: (features & FEATURE_CLUSTER_SHIPPERS != 0).then_some(i32::from(cfg >> 4)),
            pieces: g.pieces,
        }
    }
}

/// Builds the frames of a plan.
struct Generator {
    models: [Model; 8],
    out: BytesMut,
    pieces: Vec<(Vec<u8>, Duration)>,
}

fn codec(c: u8) -> Compression {
    Compression::ALL[usize::from(c) % Compression::ALL.len()]
}

/// `n` batches from `offset` on, each of `records` records with values of `value_len` bytes.
fn batches(
    offset: i64,
    n: usize,
    records: usize,
    codec: Compression,
    value_len: usize,
    epoch: i32,
) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::with_capacity(n);
    let mut at = offset;
    for _ in 0..n {
        out.push((at, batch_memo(at, records, codec, value_len, epoch)));
        at += records as i64;
    }
    out
}

/// Batches [`build_batch`] made, by their arguments: the same few batches recur in nearly every input (a chunk
/// usually continues at the next offset from 0), and building one (a compressor's context set up, the records
/// encoded) was a few percent of a run. A batch is a pure function of its arguments, so a remembered one is the
/// one the builder would make again (`tests::remembered_batches_are_the_built_ones`).
fn batch_memo(at: i64, records: usize, codec: Compression, value_len: usize, epoch: i32) -> Vec<u8> {
    type Key = (i64, usize, Compression, usize, i32);
    /// Batches remembered at most (a few MB: a batch holds at most 8 records of at most 255-byte values).
    const MAX_REMEMBERED: usize = 4096;
    static MEMO: Mutex<Option<std::collections::HashMap<Key, Vec<u8>>>> = Mutex::new(None);
    let key = (at, records, codec, value_len, epoch);
    let mut memo = MEMO.lock().unwrap_or_else(|p| p.into_inner());
    let memo = memo.get_or_insert_with(Default::default);
    if let Some(batch) = memo.get(&key) {
        return batch.clone();
    }
    let batch = build_batch(at, records, codec, value_len, epoch);
    if memo.len() >= MAX_REMEMBERED {
        memo.clear();
    }
    memo.insert(key, batch.clone());
    batch
}

/// One batch at `at` of `records` records with values of `value_len` bytes.
fn build_batch(at: i64, records: usize, codec: Compression, value_len: usize, epoch: i32) -> Vec<u8> {
    let mut b = BatchBuilder::new(at).partition_leader_epoch(epoch).compression(codec);
    for r in 0..records {
        let ts = 1_700_000_000_000 + at + r as i64;
        b = b.record(
            RecordSpec::new(r as i32, ts)
                .with_key(vec![b'k'; 3])
                .with_value(vec![b'v'; value_len]),
        );
    }
    b.build()
}

impl Generator {
    fn frame(&mut self, f: &Frame) {
        // A frame the encoder refuses (a field too long for its encoding) is simply not sent.
        let _ = frame::encode(f, MAX_PAYLOAD_LEN, &mut self.out);
    }

    fn flush(&mut self, pause: Duration) {
        let bytes = self.out.split().to_vec();
        self.pieces.push((bytes, pause));
    }

    fn op(&mut self, rec: &[u8; OP_LEN], r: &mut Bytes8<'_>) {
        let p = rec[1];
        let x: [u8; 8] = rec[2..].try_into().expect("8 bytes");
        let idx = usize::from(p & 7);
        let part = partition(p);
        match rec[0] % 16 {
            0 => self.chunk(idx, part, x),
            1 => self.seal(idx, part, x),
            2 => self.log_start(idx, part, x),
            3 => self.replace(idx, part, x),
            4 => self.truncate(idx, part, x),
            5 => self.progress(idx, part, x),
            6 => self.link_meta(x),
            7 => self.frame(&Frame::Heartbeat {
                sequence: u64::from_le_bytes(x),
            }),
            8 => self.frame(&Frame::Goodbye(Goodbye {
                reason: GoodbyeReason::from_code(u16::from(x[0])),
                message: "bye".repeat(usize::from(x[1] & 7)),
            })),
            9 => self.frame(&Frame::Claim(Claim {
                partition: part,
                leader_epoch: i32::from(x[0] as i8),
            })),
            10 => self.roll(idx, part, x),
            11 => {
                let raw = r.take(usize::from(x[0])).to_vec();
                self.out.extend_from_slice(&raw);
            }
            12 => {
                let payload = r.take(usize::from(x[2])).to_vec();
                let mut f = Vec::with_capacity(HEADER_LEN + payload.len() + 4);
                f.push(x[0]);
                f.push(x[1]);
                f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
                f.extend_from_slice(&payload);
                let crc = crc32c::crc32c(&f);
                f.extend_from_slice(&crc.to_be_bytes());
                self.out.extend_from_slice(&f);
            }
            13 => self.unexpected(part, x),
            14 => self.flush(Duration::from_millis(10 * u64::from(x[0]))),
            _ => self.flush(Duration::ZERO),
        }
    }

    /// `x0`: bits 0-1 batches − 1, bits 2-4 codec, bits 5-7 records − 1. `x1`: offset delta (signed; 0 = the
    /// next offset). `x2`: position mode (0 exact, 1 +x3 (a gap), 2 −x3 (overlap), 3 a new segment at the next
    /// offset, 4 segment base + signed x3, 5 resend the last chunk, 6 a new segment at base x3, else exact).
    /// `x4`: xor mask of a corrupted byte at index `x5` (0: intact). `x6`: value bytes. `x7`: leader epoch.
    fn chunk(&mut self, idx: usize, part: PartitionRef, x: [u8; 8]) {
        let m = &mut self.models[idx];
        if x[2] == 5 {
            if let Some(last) = m.last.clone() {
                self.frame(&Frame::Chunk(last));
            }
            return;
        }
        let n = usize::from(x[0] & 3) + 1;
        let records = usize::from(x[0] >> 5) + 1;
        let offset = m.next_offset + i64::from(x[1] as i8);
        let built = batches(
            offset,
            n,
            records,
            codec(x[0] >> 2),
            usize::from(x[6]),
            i32::from(x[7] & 3),
        );
        let mut bytes: Vec<u8> = built.iter().flat_map(|(_, b)| b.iter().copied()).collect();
        if x[4] != 0 && !bytes.is_empty() {
            let at = usize::from(x[5]) % bytes.len();
            bytes[at] ^= x[4];
        }
        // A sealed model continues in a new segment at the next offset, as a source's roll does.
        let (mut base, mut position) = if m.sealed {
            (m.next_offset, 0)
        } else {
            (m.base, m.bytes.len() as u64)
        };
        match x[2] {
            1 => position += u64::from(x[3]),
            2 => position = position.saturating_sub(u64::from(x[3])),
            3 => (base, position) = (m.next_offset, 0),
            4 => base += i64::from(x[3] as i8),
            6 => (base, position) = (i64::from(x[3]), 0),
            _ => {}
        }
        let chunk = Chunk {
            partition: part,
            segment_base: base,
            position,
            bytes: Bytes::from(bytes.clone()),
            crcs: Default::default(),
        };
        // The model follows what an applier that accepted the chunk would hold: a chunk at 0 of another segment
        // starts one (the sealed one kept for replacements).
        if position == 0 && (base != m.base || m.sealed || m.bytes.is_empty()) {
            if m.sealed {
                m.sealed_segments.push((m.base, std::mem::take(&mut m.bytes)));
            }
            m.base = base;
            m.bytes.clear();
            m.batches.clear();
            m.sealed = false;
        }
        if position == m.bytes.len() as u64 && base == m.base {
            let mut at = position;
            for (o, b) in &built {
                m.batches.push((*o, at));
                at += b.len() as u64;
            }
            m.bytes.extend_from_slice(&bytes);
            m.next_offset = offset + (n * records) as i64;
        }
        m.last = Some(chunk.clone());
        self.frame(&Frame::Chunk(chunk));
    }

    /// `x0`: final size delta (signed). `x1`: xor into the digest's first byte. `x2`: companions, bit 0 offset
    /// index inline, bit 1 time index as a digest (rebuilt), bit 2 txn index digest only, bit 3 producer snapshot
    /// inline, bit 4 the offset index twice, bit 5 a wrong companion digest; `x3`: 8-byte index entries inline.
    /// `x4`: index interval for digest-only indexes (0: none).
    fn seal(&mut self, idx: usize, part: PartitionRef, x: [u8; 8]) {
        let m = &mut self.models[idx];
        let final_size = (m.bytes.len() as u64).wrapping_add(i64::from(x[0] as i8) as u64);
        let mut log_sha256 = sha256(&m.bytes);
        log_sha256[0] ^= x[1];
        let inline = |kind: CompanionKind, n: usize, wrong: bool| {
            let bytes: Vec<u8> = (0..n * 8).map(|i| (i % 251) as u8).collect();
            let mut sha = sha256(&bytes);
            sha[1] ^= u8::from(wrong);
            Companion {
                kind,
                size: bytes.len() as u64,
                sha256: sha,
                inline: Some(Bytes::from(bytes)),
                index_interval: None,
            }
        };
        let digest_only = |kind: CompanionKind, seed: u8, interval: u8| Companion {
            kind,
            size: 12 * u64::from(seed),
            sha256: [seed; 32],
            inline: None,
            index_interval: (interval != 0).then_some(u32::from(interval) * 64),
        };
        let wrong = x[2] & 32 != 0;
        let mut companions = Vec::new();
        if x[2] & 1 != 0 {
            companions.push(inline(CompanionKind::OffsetIndex, usize::from(x[3] & 15), wrong));
        }
        if x[2] & 2 != 0 {
            companions.push(digest_only(CompanionKind::TimeIndex, x[5], x[4]));
        }
        if x[2] & 4 != 0 {
            companions.push(digest_only(CompanionKind::TxnIndex, x[5], 0));
        }
        if x[2] & 8 != 0 {
            companions.push(inline(CompanionKind::ProducerSnapshot, 3, wrong));
        }
        if x[2] & 16 != 0 {
            companions.push(inline(CompanionKind::OffsetIndex, 1, wrong));
        }
        let seal = SegmentSeal {
            partition: part,
            segment_base: m.base,
            final_size,
            log_sha256,
            companions,
        };
        if final_size == m.bytes.len() as u64 && x[1] == 0 {
            m.sealed = true;
        }
        self.frame(&Frame::SegmentSeal(seal));
    }

    /// `x0`: which offset (0 the next offset, 1 the active base, 2 the first sealed base, 3 10^12, 4 −1,
    /// 5 i64::MAX, 6 inside the active segment at batch x1, else x1 signed).
    fn log_start(&mut self, idx: usize, part: PartitionRef, x: [u8; 8]) {
        let m = &self.models[idx];
        let log_start_offset = match x[0] % 8 {
            0 => m.next_offset,
            1 => m.base,
            2 => m.sealed_segments.first().map_or(0, |s| s.0),
            3 => 1_000_000_000_000,
            4 => -1,
            5 => i64::MAX,
            6 => m
                .batches
                .get(usize::from(x[1]) % m.batches.len().max(1))
                .map_or(0, |b| b.0 + 1),
            _ => i64::from(x[1] as i8),
        };
        self.frame(&Frame::LogStart(LogStart {
            partition: part,
            log_start_offset,
        }));
    }

    /// The replaced segments' batches, the first `x1` of them dropped (a compaction), as one piece.
    /// `x0`: bits select sealed segments (all of them when 0). `x2`: position. `x3`: bit 0 no end, bit 1 a
    /// wrong digest, bit 2 a next base, bit 3 replaced bases as given by x4/x5. `x6`: xor into a byte at x7.
    fn replace(&mut self, idx: usize, part: PartitionRef, x: [u8; 8]) {
        let m = &self.models[idx];
        let chosen: Vec<&(i64, Vec<u8>)> = m
            .sealed_segments
            .iter()
            .enumerate()
            .filter(|(i, _)| x[0] == 0 || (*i < 8 && x[0] & (1 << i) != 0))
            .map(|(_, s)| s)
            .collect();
        let mut replaced_bases: Vec<i64> = chosen.iter().map(|s| s.0).collect();
        let mut bytes = Vec::new();
        for (_, seg) in &chosen {
            let mut at = 0;
            while at + 12 <= seg.len() {
                let len = u32::from_be_bytes(seg[at + 8..at + 12].try_into().expect("4 bytes")) as usize;
                let end = (at + 12 + len).min(seg.len());
                bytes.push(seg[at..end].to_vec());
                at = end;
            }
        }
        let mut bytes: Vec<u8> = bytes.into_iter().skip(usize::from(x[1])).flatten().collect();
        if x[6] != 0 && !bytes.is_empty() {
            let at = usize::from(x[7]) % bytes.len();
            bytes[at] ^= x[6];
        }
        if x[3] & 8 != 0 {
            replaced_bases = vec![i64::from(x[4] as i8), i64::from(x[5] as i8)];
        }
        let position = u64::from(x[2]);
        let end = (x[3] & 1 == 0).then(|| {
            let mut sha = sha256(&bytes);
            sha[0] ^= x[3] & 2;
            ReplaceEnd {
                final_size: position + bytes.len() as u64,
                log_sha256: sha,
                companions: Vec::new(),
                next_base: (x[3] & 4 != 0).then_some(m.base),
            }
        });
        self.frame(&Frame::SegmentReplace(SegmentReplace {
            partition: part,
            replaced_bases,
            position,
            bytes: Bytes::from(bytes),
            end,
        }));
    }

    /// `x0`: the batch of the active segment truncated to (its offset and position; past the last batch: the
    /// end). `x1`: bit 0 HighWatermark mode, bit 1 offset off by x2, bit 2 position off by x2, bit 3 evidence
    /// that does not match the mirror. `x3`/`x4`: epochs.
    fn truncate(&mut self, idx: usize, part: PartitionRef, x: [u8; 8]) {
        let m = &self.models[idx];
        let (mut truncate_to, mut position) = m
            .batches
            .get(usize::from(x[0]))
            .copied()
            .unwrap_or((m.next_offset, m.bytes.len() as u64));
        if x[1] & 2 != 0 {
            truncate_to += i64::from(x[2] as i8);
        }
        if x[1] & 4 != 0 {
            position = position.wrapping_add(i64::from(x[2] as i8) as u64);
        }
        let mirror_end_offset = if x[1] & 8 != 0 {
            m.next_offset + 5
        } else {
            m.next_offset
        };
        self.frame(&Frame::Truncate(Truncate {
            partition: part,
            truncate_to,
            segment_base: m.base,
            position,
            mode: if x[1] & 1 == 0 {
                TruncateMode::LogEnd
            } else {
                TruncateMode::HighWatermark
            },
            mirror_end_offset,
            mirror_epoch: i32::from(x[3] as i8),
            source_epoch: i32::from(x[4] as i8),
            source_end_offset: truncate_to,
        }));
    }

    /// Around the model's end: `x0`..`x3` signed deltas of the log end, high watermark (x4 bit 0: none), active
    /// size and shipped position (x4 bit 1: none).
    fn progress(&mut self, idx: usize, part: PartitionRef, x: [u8; 8]) {
        let m = &self.models[idx];
        let d = |b: u8| i64::from(b as i8);
        self.frame(&Frame::SourceProgress(SourceProgress {
            partition: part,
            log_end_offset: m.next_offset + d(x[0]),
            high_watermark: (x[4] & 1 == 0).then_some(m.next_offset + d(x[1])),
            active_segment_base: m.base,
            active_segment_size: (m.bytes.len() as u64).wrapping_add(d(x[2]) as u64),
            shipper_time_ms: 1_700_000_000_000 + u64::from(x[5]) * 1000,
            shipped: (x[4] & 2 == 0).then_some(Shipped {
                segment_base: m.base,
                position: (m.bytes.len() as u64).wrapping_add(d(x[3]) as u64),
                end_offset: m.next_offset,
            }),
        }));
    }

    /// A version of the link's metadata, valid documents unless perturbed: `x0` version, `x1` bit 0 offsets
    /// before topics, bit 1 only the first document, bit 2 another link's name, bit 3 a wrong digest, bit 4 split
    /// in two pieces, bit 5 a piece out of order; `x2` offsets of a group (`x3` signed offset).
    fn link_meta(&mut self, x: [u8; 8]) {
        let link = if x[1] & 4 != 0 { "other" } else { LINK };
        let topics = vec![TopicMeta {
            name: "orders".into(),
            // Kafka's text form of partition(0)'s topic id ([1; 16]).
            topic_id: "AQEBAQEBAQEBAQEBAQEBAQ".into(),
            partitions: 2,
            configs: Default::default(),
        }];
        let offsets = (0..x[2] & 3)
            .map(|p| GroupOffset {
                group: "g".into(),
                topic: "orders".into(),
                partition: i32::from(p),
                offset: i64::from(x[3] as i8),
                leader_epoch: None,
                metadata: String::new(),
                commit_timestamp: 0,
            })
            .collect();
        let meta = LinkMeta::new(link, u64::from(x[0]), 10, topics, "g.*", offsets);
        let docs = [
            (MetaPart::Topics, serde_json::to_vec(&meta.topics).expect("serialises")),
            (
                MetaPart::Offsets,
                serde_json::to_vec(&meta.offsets).expect("serialises"),
            ),
        ];
        let mut order: Vec<&(MetaPart, Vec<u8>)> = docs.iter().collect();
        if x[1] & 1 != 0 {
            order.reverse();
        }
        if x[1] & 2 != 0 {
            order.truncate(1);
        }
        for (part, doc) in order {
            let mut sha = sha256(doc);
            sha[0] ^= (x[1] >> 3) & 1;
            let cut = if x[1] & 16 != 0 { doc.len() / 2 } else { doc.len() };
            let mut pieces = vec![(0, &doc[..cut]), (cut, &doc[cut..])];
            if x[1] & 32 != 0 {
                pieces.reverse();
            }
            for (position, bytes) in pieces.into_iter().filter(|(_, b)| !b.is_empty()) {
                self.frame(&Frame::LinkMeta(LinkMetaPiece {
                    version: u64::from(x[0]),
                    part: *part,
                    size: doc.len() as u64,
                    sha256: sha,
                    position: position as u64,
                    bytes: Bytes::copy_from_slice(bytes),
                }));
            }
        }
    }

    /// At the model's end unless perturbed: `x0` size delta, `x1` next offset delta (signed); `x2` bit 0 the
    /// segment's digest, bit 1 a wrong one.
    fn roll(&mut self, idx: usize, part: PartitionRef, x: [u8; 8]) {
        let m = &mut self.models[idx];
        let final_size = (m.bytes.len() as u64).wrapping_add(i64::from(x[0] as i8) as u64);
        let next_offset = m.next_offset + i64::from(x[1] as i8);
        if x[0] == 0 && x[1] == 0 {
            m.sealed = true;
        }
        let log_sha256 = (x[2] & 1 != 0).then(|| {
            let mut sha = sha256(&m.bytes);
            sha[0] ^= x[2] & 2;
            sha
        });
        let roll = Roll {
            partition: part,
            segment_base: m.base,
            final_size,
            next_offset,
            log_sha256,
        };
        self.frame(&Frame::Roll(roll));
    }

    fn unexpected(&mut self, part: PartitionRef, x: [u8; 8]) {
        let position = Position {
            partition: part.clone(),
            segment_base: i64::from(x[1]),
            position: u64::from(x[2]),
        };
        let f = match x[0] % 11 {
            0 => Frame::Hello(Hello {
                min_version: 1,
                max_version: 1,
                features_supported: 0,
                features_required: 0,
                role: Role::Shipper,
                link: LINK.into(),
                source_cluster_id: Some(CLUSTER_ID.into()),
                software: "fuzz".into(),
                shipper_node_id: None,
            }),
            1 => Frame::HelloAck(HelloAck {
                version: 1,
                features: 0,
            }),
            2 => Frame::Refuse(Refuse {
                reason: RefuseReason::Busy,
                min_version: 1,
                max_version: 1,
                link: LINK.into(),
                message: "refused".into(),
            }),
            3 => Frame::Ack(position),
            4 => Frame::Resume(vec![position]),
            5 => Frame::ResumeWithEnds {
                positions: vec![position],
                ends: vec![LogEnd {
                    end_offset: 5,
                    last_epoch: 0,
                }],
            },
            6 => Frame::Credit {
                bytes: u64::from_le_bytes(x),
            },
            7 => Frame::ClaimResult(ClaimResult {
                partition: part,
                verdict: ClaimVerdict::Granted { durable: None },
            }),
            8 => Frame::Revoke(Revoke {
                partition: part,
                holder_node: 1,
                holder_epoch: 2,
            }),
            9 => Frame::MirrorLayout(MirrorLayout {
                partition: part,
                last: true,
                segments: vec![LayoutSegment { base: 0, size: 10 }],
            }),
            _ => Frame::LinkId(LinkId {
                link_id: "0123456789abcdef0123456789abcdef".into(),
            }),
        };
        self.frame(&f);
    }
}

/// Whether `e` is a failure of this side's own disk: an I/O error of a disk-failure kind somewhere in its
/// chain (tmpfs full, a read-only or failing file system). Only then may a session end with a Local error.
pub fn disk_failed(e: &DirectError) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            if matches!(io.kind(), StorageFull | QuotaExceeded | ReadOnlyFilesystem)
                || matches!(io.raw_os_error(), Some(5 /* EIO */ | 28 /* ENOSPC */))
            {
                return true;
            }
        }
        cause = c.source();
    }
    false
}

/// A short name for an error's kind, for the survey (`DIRECT_SESSION_LOCAL=report`): the step and the first word
/// of the cause's debug form (its variant).
fn kind_of(e: &DirectError) -> String {
    match e {
        DirectError::Local { what, source } => {
            let debug = format!("{source:?}");
            let variant: String = debug.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            format!("{what}: {variant}")
        }
        other => format!("{other:?}").chars().take(40).collect(),
    }
}

/// `DIRECT_SESSION_VERBOSE` set: print how each session ended (replaying a corpus to see what it reaches).
fn verbose() -> bool {
    static V: OnceLock<bool> = OnceLock::new();
    *V.get_or_init(|| std::env::var_os("DIRECT_SESSION_VERBOSE").is_some())
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a runtime")
    })
}

/// Name of a process's scratch directory, before its process id.
const SCRATCH_PREFIX: &str = "segmirror-fuzz-session-";

/// The scratch directory of this process: `/dev/shm` when there is one (tmpfs), else the temp dir.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        // Scratch directories of processes that are gone (a fuzzer stopped, a crash) are removed.
        if let Ok(entries) = std::fs::read_dir(&base) {
            for entry in entries.flatten() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let Some(rest) = name.strip_prefix(SCRATCH_PREFIX) else {
                    continue;
                };
                let pid = rest.trim_end_matches("-catalog.db");
                if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
                    let _ = std::fs::remove_dir_all(entry.path()).or_else(|_| std::fs::remove_file(entry.path()));
                }
            }
        }
        base.join(format!("{SCRATCH_PREFIX}{}", std::process::id()))
    })
}

/// A catalog with the link recorded, made once per process: each run starts from a copy (creating the schema
/// cost 2.4 ms, most of a short run; copying and opening the copy costs less).
fn template() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let path = PathBuf::from(format!("{}-catalog.db", scratch().display()));
        let _ = std::fs::remove_file(&path);
        let catalog = Catalog::open(&path).expect("the template catalog");
        drop(TailCatalog::open(catalog, LINK).expect("the link recorded in the template"));
        path
    })
}

/// Runs one input. See the module doc for what is asserted.
///
/// # Panics
/// When a property fails.
pub fn direct_session(data: &[u8]) {
    // One run at a time per process (tests run in threads): the scratch directory and the runtime are shared.
    static ONE: Mutex<()> = Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let plan = Plan::from_bytes(data);
    let dir = scratch();
    // Every run starts from an empty mirror and catalog, so a run never depends on the ones before it.
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => panic!("clearing {}: {e}", dir.display()),
    }
    let root = dir.join("mirror");
    std::fs::create_dir_all(&root).expect("the scratch mirror root");
    runtime().block_on(run_plan(plan, &root, &dir.join("catalog.db")));
}

async fn run_plan(plan: Plan, root: &Path, catalog_path: &Path) {
    // libFuzzer's timers interrupt system calls (the survey run's last unit met EINTR here): tried again.
    while let Err(e) = std::fs::copy(template(), catalog_path) {
        assert_eq!(
            e.kind(),
            std::io::ErrorKind::Interrupted,
            "a fresh catalog from the template: {e}"
        );
    }
    let catalog = Catalog::open(catalog_path).expect("a fresh catalog");
    let catalog = TailCatalog::open(catalog, LINK).expect("the link recorded");
    let appender = TailAppender::open_with_catalog(root, catalog).expect("an empty mirror opens");
    let config = SessionConfig {
        credit_window: plan.credit_window,
        ..SessionConfig::default()
    };
    let mut session = ApplierSession::new(appender, config).expect("a valid session config");

    let (a, b) = tokio::io::duplex(256 << 10);
    let applier_hs = HandshakeConfig::new(Role::Applier, LINK, None);
    let mut shipper_hs = HandshakeConfig::new(Role::Shipper, LINK, Some(CLUSTER_ID.into()));
    shipper_hs.features_supported = plan.features;
    shipper_hs.shipper_node_id = plan.node;
    let (applier_side, shipper_side) = tokio::join!(
        handshake(Box::new(a) as BoxIo, &applier_hs),
        handshake(Box::new(b) as BoxIo, &shipper_hs)
    );
    let (framed, agreed) = applier_side.expect("the applier's side of a valid handshake");
    let (shipper, _) = shipper_side.expect("the shipper's side of a valid handshake");
    let (mut rd, mut wr) = tokio::io::split(shipper.into_parts().io);
    // The applier's frames (Resume, Credit, Acks, heartbeats) are read and dropped, so its writes never block.
    let drain = tokio::spawn(async move {
        let mut buf = vec![0u8; 16 << 10];
        while matches!(rd.read(&mut buf).await, Ok(n) if n > 0) {}
    });
    let eof = plan.eof;
    let feed = tokio::spawn(async move {
        for (bytes, pause) in plan.pieces {
            if wr.write_all(&bytes).await.is_err() {
                return;
            }
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
        if eof {
            let _ = wr.shutdown().await;
        } else {
            // Silent but open: the session ends by its idle timeout.
            std::future::pending::<()>().await;
        }
    });
    let shutdown = CancellationToken::new();
    let ended = tokio::time::timeout(SESSION_BOUND, session.run(framed, &agreed, &shutdown)).await;
    feed.abort();
    drain.abort();
    let _ = feed.await;
    let _ = drain.await;
    let ended = ended.unwrap_or_else(|_| panic!("the session did not end within {SESSION_BOUND:?} (virtual time)"));
    if verbose() {
        eprintln!("direct_session: the session ended: {ended:?}");
    }
    if let Err(e) = &ended {
        if e.class() == ErrorClass::Local && !disk_failed(e) {
            let message = format!("a peer's frames ended the session with a Local error (the process would exit): {e}");
            if std::env::var_os("DIRECT_SESSION_LOCAL").is_some_and(|v| v == "report") {
                static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
                let kind = kind_of(e);
                let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
                if seen.get_or_insert_with(HashSet::new).insert(kind.clone()) {
                    eprintln!("direct_session: Local [{kind}]: {e}");
                }
            } else {
                panic!("{message}");
            }
        }
    }
    drop(session);
    // The mirror a hostile session leaves must still be one the appender opens and resumes.
    let mut reopened = TailAppender::open(root).unwrap_or_else(|e| panic!("the mirror root no longer opens: {e}"));
    if let Err(e) = reopened.durable_positions().await {
        panic!("the mirror's durable positions no longer read after the session ({ended:?}): {e}");
    }
}

/// Builds inputs: a header and operations.
pub struct InputBuilder {
    bytes: Vec<u8>,
}

impl InputBuilder {
    /// `features`: bits of [`FEATURES`] (all: `0x1ff`); `cfg`: credit window (bits 0-1), stay open (bit 2),
    /// node id (bits 4-7).
    pub fn new(features: u16, cfg: u8) -> InputBuilder {
        let [lo, hi] = features.to_le_bytes();
        InputBuilder {
            bytes: vec![lo, hi, cfg],
        }
    }

    pub fn op(mut self, op: Op, p: u8, x: [u8; 8]) -> InputBuilder {
        self.bytes.push(op as u8);
        self.bytes.push(p);
        self.bytes.extend_from_slice(&x);
        self
    }

    /// An operation followed by the bytes it takes (`Raw`, `AnyFrame`).
    pub fn op_with(self, op: Op, p: u8, x: [u8; 8], tail: &[u8]) -> InputBuilder {
        let mut b = self.op(op, p, x);
        b.bytes.extend_from_slice(tail);
        b
    }

    pub fn build(self) -> Vec<u8> {
        self.bytes
    }
}

/// Seeds: an honest history (chunks, seals, a log start, progress, link metadata, a goodbye) with every
/// feature, the same under the cluster feature with a claim and a roll, and one seed per kind of hostile frame.
pub fn seeds() -> Vec<Vec<u8>> {
    use Op::*;
    let all = 0x1ff;
    let no_cluster = 0x1ff & !(1 << 5);
    let chunk = |codec: u8| [1 | (codec << 2) | (1 << 5), 0, 0, 0, 0, 0, 20, 0];
    let honest = |b: InputBuilder, progress: bool| {
        let b = b
            .op(Chunk, 0, chunk(0))
            .op(Chunk, 0, chunk(1))
            .op(Flush, 0, [0; 8])
            .op(Chunk, 0, chunk(4))
            .op(Seal, 0, [0; 8])
            .op(Chunk, 0, chunk(2))
            .op(Chunk, 1, chunk(3));
        let b = if progress { b.op(Progress, 0, [0; 8]) } else { b };
        let b = b.op(Seal, 0, [0, 0, 1, 2, 0, 9, 0, 0]).op(Chunk, 0, chunk(0));
        let b = if progress {
            b.op(LogStart, 0, [1, 0, 0, 0, 0, 0, 0, 0])
                .op(LinkMeta, 0, [1, 16, 2, 3, 0, 0, 0, 0])
        } else {
            b
        };
        b.op(Heartbeat, 0, [0; 8])
    };
    let mut out = vec![
        honest(InputBuilder::new(no_cluster, 1), true)
            .op(Goodbye, 0, [1, 1, 0, 0, 0, 0, 0, 0])
            .build(),
        honest(InputBuilder::new(no_cluster, 1 | 4), true).build(),
        honest(InputBuilder::new(0, 0), false).build(),
        InputBuilder::new(all, 1 | (1 << 4))
            .op(Claim, 0, [3; 8])
            .op(Chunk, 0, chunk(0))
            .op(Roll, 0, [0; 8])
            .op(Chunk, 0, chunk(0))
            .op(Claim, 1, [0; 8])
            .op(Chunk, 1, chunk(0))
            .build(),
    ];
    let base = || {
        InputBuilder::new(no_cluster, 1)
            .op(Chunk, 0, chunk(0))
            .op(Chunk, 0, chunk(0))
    };
    // The hostile frames a peer could send, each after a valid start.
    out.push(base().op(Chunk, 0, [1, 0, 0, 0, 0x40, 20, 20, 0]).build()); // a bad batch CRC
    out.push(base().op(Chunk, 0, [1, 0xf0, 0, 0, 0, 0, 20, 0]).build()); // offsets going back
    out.push(base().op(Chunk, 0, [1, 0, 1, 7, 0, 0, 20, 0]).build()); // a gap
    out.push(base().op(Chunk, 0, [1, 0, 5, 0, 0, 0, 0, 0]).build()); // a resend
    out.push(base().op(Seal, 0, [0, 1, 0, 0, 0, 0, 0, 0]).build()); // a wrong seal digest
    out.push(base().op(Chunk, 5, chunk(0)).build()); // a hostile topic name
    out.push(base().op(Chunk, 2, chunk(0)).build()); // the topic recreated
    out.push(
        base()
            .op(Seal, 0, [0; 8])
            .op(LogStart, 0, [3, 0, 0, 0, 0, 0, 0, 0])
            .build(),
    ); // LogStart 10^12
    out.push(
        base()
            .op(Seal, 0, [0; 8])
            .op(Chunk, 0, chunk(0))
            .op(Seal, 0, [0; 8])
            .op(Chunk, 0, chunk(0))
            .op(Replace, 0, [0, 1, 0, 0, 0, 0, 0, 0])
            .build(),
    );
    out.push(base().op(Truncate, 0, [1, 0, 0, 0, 0, 0, 0, 0]).build());
    out.push(base().op(Truncate, 0, [0, 1, 0, 0, 0, 0, 0, 0]).build());
    out.push(base().op(Roll, 0, [0; 8]).build()); // a Roll without the cluster feature
    out.push(
        base()
            .op(Unexpected, 0, [3, 0, 0, 0, 0, 0, 0, 0])
            .op(Unexpected, 0, [6, 1, 0, 0, 0, 0, 0, 0])
            .build(),
    );
    out.push(
        base()
            .op_with(
                AnyFrame,
                0,
                [4, 0, 8, 0, 0, 0, 0, 0],
                &[0, 6, b'o', b'r', b'd', b'e', b'r', b's'],
            )
            .build(),
    );
    out.push(base().op_with(Raw, 0, [4, 0, 0, 0, 0, 0, 0, 0], &[4, 0, 0, 0]).build());
    out.push(
        InputBuilder::new(no_cluster, 0)
            .op(Chunk, 0, [3, 0, 0, 0, 0, 0, 255, 0])
            .op(Chunk, 0, [3, 0, 0, 0, 0, 0, 255, 0])
            .build(),
    ); // credit exceeded
    out.push(
        base()
            .op(Pause, 0, [255, 0, 0, 0, 0, 0, 0, 0])
            .op(Chunk, 0, chunk(0))
            .build(),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_decode_any_bytes() {
        for len in 0..64 {
            let data: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let plan = Plan::from_bytes(&data);
            assert!(!plan.pieces.is_empty());
        }
    }

    /// Inputs the fuzzer found that broke a property, minimised (`fuzz/regressions/direct_session-*`): a
    /// SegmentReplace piece at a position > 0 with nothing staged (ended the session with a Local I/O error), and a
    /// Claim of topic `../orders` (its claim record overwrote `.tail/orders-0.json`; the root no longer opened).
    #[test]
    fn regressions_pass() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
        let mut replayed = 0;
        for entry in std::fs::read_dir(&dir).expect("fuzz/regressions") {
            let path = entry.expect("a directory entry").path();
            if path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("direct_session-"))
            {
                direct_session(&std::fs::read(&path).expect("a regression input"));
                replayed += 1;
            }
        }
        assert!(replayed > 0, "no direct_session regression in {}", dir.display());
    }

    #[test]
    fn remembered_batches_are_the_built_ones() {
        for codec in Compression::ALL {
            for (at, records, value_len) in [(0, 1, 20), (5, 3, 0), (-7, 8, 255)] {
                let first = batch_memo(at, records, codec, value_len, 1);
                assert_eq!(first, build_batch(at, records, codec, value_len, 1));
                assert_eq!(batch_memo(at, records, codec, value_len, 1), first, "{codec:?}");
            }
        }
    }

    #[test]
    fn the_honest_seed_installs_what_it_sends() {
        // The first seed's chunks and seals must be accepted: otherwise the model drives nothing deep.
        let seed = &seeds()[0];
        let plan = Plan::from_bytes(seed);
        let stream: Vec<u8> = plan.pieces.iter().flat_map(|(b, _)| b.iter().copied()).collect();
        let mut at = 0;
        let mut chunks = 0;
        while let Ok(Some((f, used))) = frame::decode(&stream[at..], at as u64, MAX_PAYLOAD_LEN) {
            chunks += usize::from(matches!(f, Frame::Chunk(_)));
            at += used;
        }
        assert_eq!(at, stream.len(), "every generated frame decodes");
        assert_eq!(chunks, 6);
    }
}
