//! The typed payloads of the direct protocol's frames and their field codecs.
//!
//! Every integer is big-endian, as in Kafka's own formats, so a hex dump of a
//! frame reads like the log it carries. Strings are a `u16` length and UTF-8;
//! byte runs are a `u32` length and the bytes. A decoder never allocates by a
//! length it has not checked against the bytes actually present: the whole frame
//! is already in memory (bounded by the maximum frame size) when a payload is read.
//! See `docs/direct-protocol.md` for the field tables. The field codecs themselves (`Reader`, `Writer`) are in
//! `fields`.

use bytes::Bytes;

pub use super::codes::{RefuseReason, Role};

mod fields;

pub(crate) use fields::{Reader, Writer, MIN_POSITION_LEN};

/// First bytes of a Hello payload: tells a segmirror direct peer from anything
/// else that happens to frame cleanly.
pub const HELLO_MAGIC: [u8; 4] = *b"SGMR";

pub use super::codes::TopicId;

/// A SHA-256 digest.
pub type Sha256 = [u8; 32];

/// Why a side closes a session (the `reason` of a Goodbye frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GoodbyeReason {
    /// Clean stop (SIGTERM/SIGINT); the peer reconnects later.
    Shutdown,
    /// An error on the sending side; the message says which.
    Error,
    Other(u16),
}

impl GoodbyeReason {
    pub const fn code(self) -> u16 {
        match self {
            GoodbyeReason::Shutdown => 1,
            GoodbyeReason::Error => 2,
            GoodbyeReason::Other(code) => code,
        }
    }

    pub const fn from_code(code: u16) -> GoodbyeReason {
        match code {
            1 => GoodbyeReason::Shutdown,
            2 => GoodbyeReason::Error,
            other => GoodbyeReason::Other(other),
        }
    }
}

/// A companion file of a sealed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CompanionKind {
    OffsetIndex,
    TimeIndex,
    TxnIndex,
    ProducerSnapshot,
}

impl CompanionKind {
    pub const ALL: [CompanionKind; 4] = [
        CompanionKind::OffsetIndex,
        CompanionKind::TimeIndex,
        CompanionKind::TxnIndex,
        CompanionKind::ProducerSnapshot,
    ];

    pub const fn code(self) -> u8 {
        match self {
            CompanionKind::OffsetIndex => 1,
            CompanionKind::TimeIndex => 2,
            CompanionKind::TxnIndex => 3,
            CompanionKind::ProducerSnapshot => 4,
        }
    }

    pub const fn from_code(code: u8) -> Option<CompanionKind> {
        match code {
            1 => Some(CompanionKind::OffsetIndex),
            2 => Some(CompanionKind::TimeIndex),
            3 => Some(CompanionKind::TxnIndex),
            4 => Some(CompanionKind::ProducerSnapshot),
            _ => None,
        }
    }
}

pub use super::codes::PartitionRef;

/// The first frame each side sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub min_version: u16,
    pub max_version: u16,
    /// Feature bits this side can use.
    pub features_supported: u64,
    /// Feature bits this side cannot work without.
    pub features_required: u64,
    pub role: Role,
    pub link: String,
    /// The shipper's source cluster id (always sent by a shipper); an applier
    /// sends the one its mirror follows, when it knows it.
    pub source_cluster_id: Option<String>,
    /// Free text for messages, e.g. `segmirror 0.1.0`.
    pub software: String,
    /// The source broker beside which a shipper runs: present exactly when `role` is shipper and
    /// `features_supported` has [`FEATURE_CLUSTER_SHIPPERS`](super::handshake::FEATURE_CLUSTER_SHIPPERS) (a
    /// trailing field, so an older applier never sees it: it lacks the bit, and the shipper requires it).
    pub shipper_node_id: Option<i32>,
}

/// The applier's decision: the session's version and features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelloAck {
    pub version: u16,
    pub features: u64,
}

/// A refusal; the sender closes the connection after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refuse {
    pub reason: RefuseReason,
    /// The sender's own version range and link name, so the receiver can name both sides.
    pub min_version: u16,
    pub max_version: u16,
    pub link: String,
    pub message: String,
}

/// Bytes appended to a partition's active segment, ending on a batch boundary.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub partition: PartitionRef,
    /// Base offset of the segment the bytes belong to (its file name).
    pub segment_base: i64,
    /// Byte position in the segment file of the first byte.
    pub position: u64,
    pub bytes: Bytes,
    /// CRCs of `bytes` already computed, so that nobody hashes them again. Not sent and not part of equality.
    pub crcs: ChunkCrcs,
}

/// CRC-32Cs of a [`Chunk`]'s bytes that one side computed once and the next step reuses (why: the CRC-32C passes
/// over every byte were a fifth of the shipper's CPU).
#[derive(Debug, Clone, Default)]
pub struct ChunkCrcs {
    /// The CRC-32C of all the bytes, when the sender already has it (the shipper's tail combines it from the batch
    /// CRCs its scan checked): the frame's CRC is then combined from it instead of hashing the bytes once more. A
    /// wrong value makes the frame's CRC wrong, so the receiver refuses the frame: it can never let other bytes
    /// through.
    pub bytes: Option<u32>,
    /// Set by the decoder, which checked the frame's CRC by hashing each large v2 batch's body on its own and
    /// combining: per batch, its position in the chunk, its size and the CRC-32C of its bytes from the attributes
    /// on (what its stored CRC must equal). A batch check that finds its position and size here takes the CRC
    /// instead of hashing the batch again ([`segment_format::log::scan_frames_known`]).
    pub batches: Vec<segment_format::log::KnownCrc>,
}

impl ChunkCrcs {
    /// The bytes' CRC-32C is `crc`.
    pub fn of_bytes(crc: u32) -> ChunkCrcs {
        ChunkCrcs {
            bytes: Some(crc),
            batches: Vec::new(),
        }
    }
}

impl PartialEq for Chunk {
    fn eq(&self, other: &Self) -> bool {
        self.partition == other.partition
            && self.segment_base == other.segment_base
            && self.position == other.position
            && self.bytes == other.bytes
    }
}

impl Eq for Chunk {}

/// One companion file of a sealed segment: digest always, bytes when sent inline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Companion {
    pub kind: CompanionKind,
    pub size: u64,
    pub sha256: Sha256,
    pub inline: Option<Bytes>,
    /// An offset or time index sent as a digest only, to be rebuilt with this `index.interval.bytes` instead of
    /// Kafka's default 4096 (the source topic's own interval, which the shipper read off the broker's index). Never
    /// with `inline`; sent only on sessions that agreed
    /// [`FEATURE_INDEX_INTERVAL`](super::handshake::FEATURE_INDEX_INTERVAL).
    pub index_interval: Option<u32>,
}

/// A segment is sealed (rolled): its final size and digest, and its companions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentSeal {
    pub partition: PartitionRef,
    pub segment_base: i64,
    pub final_size: u64,
    /// SHA-256 of the whole sealed `.log`, all chunks together.
    pub log_sha256: Sha256,
    /// At most one per kind.
    pub companions: Vec<Companion>,
}

/// The source partition's log start moved: every segment wholly below `log_start_offset` is gone from the source
/// (retention, `DeleteRecords`). Sent only on sessions that agreed [`super::handshake::FEATURE_LOG_START`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogStart {
    pub partition: PartitionRef,
    pub log_start_offset: i64,
}

/// Where a partition of the mirror ends, by its own bytes: the offset after its last batch and that batch's
/// partition leader epoch. Sent per Resume position on sessions that agreed
/// [`super::handshake::FEATURE_TRUNCATE`], so the shipper can ask its source where the two logs agree, as a Kafka
/// follower asks its leader with `OffsetsForLeaderEpoch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LogEnd {
    /// One past the mirror's last offset (the segment base when the mirror holds no batch).
    pub end_offset: i64,
    /// The partition leader epoch of the mirror's last v2 batch; `-1` when it holds none (empty, or legacy only).
    pub last_epoch: i32,
}

/// Bytes one [`LogEnd`] takes on the wire: `end_offset: offset`, `last_epoch: i32`.
pub const LOG_END_LEN: usize = 12;

/// What the shipper's bound was when it found the divergence, so the applier knows whether to truncate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TruncateMode {
    /// `--upto log-end`: records above the high watermark were shipped and the source dropped them; the applier
    /// truncates to match, keeping what it removes in its archive.
    LogEnd,
    /// `--upto high-watermark`: only committed records were shipped, so the source lost committed data. The
    /// applier records the divergence and stops the partition; nothing is truncated.
    HighWatermark,
}

impl TruncateMode {
    pub const fn code(self) -> u8 {
        match self {
            TruncateMode::LogEnd => 1,
            TruncateMode::HighWatermark => 2,
        }
    }

    pub const fn from_code(code: u8) -> Option<TruncateMode> {
        match code {
            1 => Some(TruncateMode::LogEnd),
            2 => Some(TruncateMode::HighWatermark),
            _ => None,
        }
    }
}

/// The source no longer holds what the mirror holds from `truncate_to` on (shipper → applier, only on sessions
/// that agreed [`super::handshake::FEATURE_TRUNCATE`]). `segment_base`/`position` name where the batch starting at
/// `truncate_to` lies (the source's layout, which the mirror shares below the divergence); the rest is the
/// evidence: the mirror's end as its Resume said it, and the source's answer to "where does your log end for the
/// mirror's last epoch" (Kafka's `LeaderEpochFileCache.endOffsetFor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncate {
    pub partition: PartitionRef,
    /// The first offset removed: the base offset of a batch the mirror holds (or of the segment at `position` 0).
    pub truncate_to: i64,
    pub segment_base: i64,
    /// Byte position in `segment_base` where the batch at `truncate_to` starts: the mirror's new end.
    pub position: u64,
    pub mode: TruncateMode,
    /// The mirror's end as its Resume said it.
    pub mirror_end_offset: i64,
    pub mirror_epoch: i32,
    /// The source's answer for `mirror_epoch`: the largest epoch it has at or below it (`-1`: none) and where that
    /// epoch ends in its log.
    pub source_epoch: i32,
    pub source_end_offset: i64,
}

/// Where the source partition stands, for lag reporting only: the shipper sends it at most every
/// [`super::handshake::PROGRESS_INTERVAL`] and when it changes, on sessions that agreed
/// [`super::handshake::FEATURE_SOURCE_PROGRESS`]. Advisory: it moves no position, costs no credit, gets no Ack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceProgress {
    pub partition: PartitionRef,
    /// The source's log end offset (next offset after the last complete batch the shipper saw).
    pub log_end_offset: i64,
    /// The source's high watermark, when the shipper knows it (ListOffsets or the replication checkpoint).
    pub high_watermark: Option<i64>,
    /// Base offset of the source's active (last) segment.
    pub active_segment_base: i64,
    /// Size in bytes of the source's active segment as last read.
    pub active_segment_size: u64,
    /// The shipper's wall clock when it took these figures, milliseconds since the Unix epoch.
    pub shipper_time_ms: u64,
    /// How far the shipper has read this partition and handed it to the connection; sent only on sessions that
    /// agreed [`FEATURE_PROGRESS_SHIPPED`](super::handshake::FEATURE_PROGRESS_SHIPPED) (an older applier would
    /// refuse the trailing bytes).
    pub shipped: Option<Shipped>,
}

/// The shipper's send position of a partition: everything before it was read from the source and handed to the
/// connection (in flight or acknowledged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shipped {
    /// Base offset of the segment the shipper is in.
    pub segment_base: i64,
    /// Byte position in that segment up to which it has shipped (a batch boundary).
    pub position: u64,
    /// The offset after the last shipped record (`segment_base` when none of the segment is shipped).
    pub end_offset: i64,
}

/// A piece of a new version of a range of sealed segments (the source's cleaner rewrote them, possibly merging
/// several into one with the first one's base): the new file's bytes at `position`, staged by the applier; the
/// last piece carries `end`, after which the applier validates and installs it in place of `replaced_bases`. Sent
/// only on sessions that agreed [`super::handshake::FEATURE_SEGMENT_REPLACE`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentReplace {
    pub partition: PartitionRef,
    /// The sealed segments replaced, strictly increasing; the first is the new file's base offset.
    pub replaced_bases: Vec<i64>,
    /// Byte position of `bytes` in the new file (0 starts the staging over).
    pub position: u64,
    pub bytes: Bytes,
    /// On the last piece: the whole new file's size, digest and companions, as in a seal.
    pub end: Option<ReplaceEnd>,
}

/// What the last piece of a [`SegmentReplace`] says about the whole new file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplaceEnd {
    pub final_size: u64,
    pub log_sha256: Sha256,
    /// At most one per kind, in kind order.
    pub companions: Vec<Companion>,
    /// The base of the source segment that follows the new file (the end of its offset range). Sent only on
    /// sessions that agreed [`super::handshake::FEATURE_MIRROR_LAYOUT`] (a trailing field an older applier would
    /// refuse); required by an applier when the replacement covers the segment it is appending to.
    pub next_base: Option<i64>,
}

/// Applier → shipper right after Resume, on sessions that agreed
/// [`super::handshake::FEATURE_MIRROR_LAYOUT`]: part of the list of one partition's *sealed* mirror segments
/// (base offset and `.log` size, bases strictly increasing), so a shipper that has no memory of what it shipped (a
/// restart) can tell which source segments the cleaner rewrote meanwhile. A long list travels in several frames of
/// at most [`MAX_LAYOUT_SEGMENTS_PER_FRAME`] segments; the partition's last frame has `last` set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorLayout {
    pub partition: PartitionRef,
    /// The last frame of this partition's list.
    pub last: bool,
    pub segments: Vec<LayoutSegment>,
}

/// One sealed mirror segment of a [`MirrorLayout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutSegment {
    pub base: i64,
    pub size: u64,
}

/// Most segments in one MirrorLayout frame (4,096: 64 KiB of entries, well inside any frame limit; a partition
/// with more segments takes several frames).
pub const MAX_LAYOUT_SEGMENTS_PER_FRAME: usize = 4096;

/// Which document of a link's metadata version a [`LinkMetaPiece`] carries: the same two documents a bucket holds
/// under `<link>/_meta/data/<version>/` (`segmirror_contract::link_meta`), byte for byte as the shipper serialised them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MetaPart {
    /// `topics.json`: a [`segmirror_contract::link_meta::TopicsDoc`].
    Topics,
    /// `offsets.json`: an [`segmirror_contract::link_meta::OffsetsDoc`].
    Offsets,
}

impl MetaPart {
    pub const fn code(self) -> u8 {
        match self {
            MetaPart::Topics => 1,
            MetaPart::Offsets => 2,
        }
    }

    pub const fn from_code(code: u8) -> Option<MetaPart> {
        match code {
            1 => Some(MetaPart::Topics),
            2 => Some(MetaPart::Offsets),
            _ => None,
        }
    }

    /// The most bytes the document may have: the bucket's caps ([`segmirror_contract::link_meta::MAX_TOPICS_BYTES`],
    /// [`segmirror_contract::link_meta::MAX_OFFSETS_BYTES`]), checked by the decoder before anything is buffered.
    pub const fn max_size(self) -> u64 {
        match self {
            MetaPart::Topics => segmirror_contract::link_meta::MAX_TOPICS_BYTES,
            MetaPart::Offsets => segmirror_contract::link_meta::MAX_OFFSETS_BYTES,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            MetaPart::Topics => "topics.json",
            MetaPart::Offsets => "offsets.json",
        }
    }
}

/// Shipper → applier on sessions that agreed [`super::codes::FEATURE_LINK_META`]: a piece of one document of a link
/// metadata version. Every piece repeats the document's whole `size` and `sha256`, so the receiver bounds the
/// document before it buffers a byte of it and checks the digest once the last piece is in (as a seal's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkMetaPiece {
    /// The shipper's version of the metadata (the documents' `version` field too).
    pub version: u64,
    pub part: MetaPart,
    /// The whole document's size in bytes (at most [`MetaPart::max_size`]).
    pub size: u64,
    /// SHA-256 of the whole document.
    pub sha256: Sha256,
    /// Where in the document `bytes` start (`position + bytes.len() <= size`).
    pub position: u64,
    pub bytes: Bytes,
}

/// Shipper → applier right after HelloAck on sessions that agreed [`super::codes::FEATURE_LINK_ID`]: the id of the
/// shipper's link record (32 lowercase hex digits, as in the bucket's `link@identity.json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkId {
    pub link_id: String,
}

/// A link id: 32 hex digits (a link record's id, `segmirror link create`).
pub fn check_link_id(id: &str) -> Result<(), String> {
    if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("{id:?} is not 32 hex digits"));
    }
    Ok(())
}

/// A position in a partition: segment and byte position in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Position {
    pub partition: PartitionRef,
    pub segment_base: i64,
    pub position: u64,
}

/// Shipper → applier (feature bit 6): "my broker leads `partition` at `leader_epoch`; let me ship it".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub partition: PartitionRef,
    /// The partition's current leader epoch in the source's metadata (≥ 0).
    pub leader_epoch: i32,
}

/// Where a granted partition continues: its durable position (exactly as a Resume entry) and the mirror's end
/// offset (the offset after its last batch).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedAt {
    pub segment_base: i64,
    pub position: u64,
    pub end_offset: i64,
    /// The CRC (as stored in its header) of the mirror's last batch, the one ending at `end_offset - 1`: the new
    /// holder proves that its replica's batch there is the same one before it appends after it. A trailing field
    /// (`None`: not sent, e.g. by an applier built before it); with nothing in the mirror below the position there
    /// is no batch to name.
    pub last_batch_crc: Option<u32>,
}

/// The applier's answer to a [`Claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimVerdict {
    /// Granted; `durable` is `None` when nothing of the partition is in the mirror (start at the source's first
    /// segment).
    Granted { durable: Option<ClaimedAt> },
    /// Refused: another node holds the partition at this epoch (or the claim's epoch is below the granted one).
    Refused { holder_node: i32, holder_epoch: i32 },
}

/// Applier → shipper (feature bit 6), one per Claim in Claim order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimResult {
    pub partition: PartitionRef,
    pub verdict: ClaimVerdict,
}

impl ClaimResult {
    /// The durable position of a grant as a Resume entry (`None`: refused, or nothing durable yet).
    pub fn resume_position(&self) -> Option<Position> {
        match &self.verdict {
            ClaimVerdict::Granted { durable: Some(at) } => Some(Position {
                partition: self.partition.clone(),
                segment_base: at.segment_base,
                position: at.position,
            }),
            _ => None,
        }
    }
}

/// Applier → shipper (feature bit 6): another node now holds `partition`; this session may append nothing more to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Revoke {
    pub partition: PartitionRef,
    pub holder_node: i32,
    pub holder_epoch: i32,
}

/// Shipper → applier (feature bit 6): the mirror's segment `segment_base` ends at `final_size` bytes, where no broker
/// file of the new holder ends; the applier builds its companions itself. The next segment starts at `next_offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roll {
    pub partition: PartitionRef,
    pub segment_base: i64,
    pub final_size: u64,
    /// The next segment's base offset: the offset after this segment's last batch (above `segment_base`).
    pub next_offset: i64,
    /// SHA-256 of the whole mirror segment, when the shipper computed it (else the applier hashes).
    pub log_sha256: Option<Sha256>,
}

/// Payload of a Goodbye frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Goodbye {
    pub reason: GoodbyeReason,
    pub message: String,
}
