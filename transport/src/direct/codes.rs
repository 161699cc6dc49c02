//! The direct protocol's enumerated codes that both the payloads and the errors speak of: which end a side is
//! ([`Role`]), why a side refused its peer ([`RefuseReason`]), which partition a frame is about ([`PartitionRef`])
//! and the feature bits (`FEATURE_*`, re-exported by `handshake`). Kept apart from `payload`, `frame` and
//! `handshake` so that the error type and the codecs can name them without those modules importing each other.

use std::fmt;

/// Which end of the replication a side is. Independent of who dialled: in push
/// mode the shipper dials, in pull mode the applier dials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Shipper,
    Applier,
}

impl Role {
    pub const fn code(self) -> u8 {
        match self {
            Role::Shipper => 1,
            Role::Applier => 2,
        }
    }

    pub const fn from_code(code: u8) -> Option<Role> {
        match code {
            1 => Some(Role::Shipper),
            2 => Some(Role::Applier),
            _ => None,
        }
    }

    /// The role a compatible peer has.
    pub const fn peer(self) -> Role {
        match self {
            Role::Shipper => Role::Applier,
            Role::Applier => Role::Shipper,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Role::Shipper => "shipper",
            Role::Applier => "applier",
        })
    }
}

/// Why a side refused its peer in the handshake (the `reason` of a Refuse frame).
/// Codes a newer peer may add decode as [`RefuseReason::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefuseReason {
    /// The protocol version ranges do not overlap.
    Version,
    /// The link names differ.
    Link,
    /// The shipper's source cluster id is not the one the applier's mirror follows.
    SourceCluster,
    /// Both sides claim the same role.
    Role,
    /// A feature one side requires is not supported by the other.
    Features,
    /// The peer broke the handshake's rules (bad magic, a field missing).
    Protocol,
    /// Another session already serves this link (planned: one session per link).
    Busy,
    Other(u16),
}

impl RefuseReason {
    pub const fn code(self) -> u16 {
        match self {
            RefuseReason::Version => 1,
            RefuseReason::Link => 2,
            RefuseReason::SourceCluster => 3,
            RefuseReason::Role => 4,
            RefuseReason::Features => 5,
            RefuseReason::Protocol => 6,
            RefuseReason::Busy => 7,
            RefuseReason::Other(code) => code,
        }
    }

    pub const fn from_code(code: u16) -> RefuseReason {
        match code {
            1 => RefuseReason::Version,
            2 => RefuseReason::Link,
            3 => RefuseReason::SourceCluster,
            4 => RefuseReason::Role,
            5 => RefuseReason::Features,
            6 => RefuseReason::Protocol,
            7 => RefuseReason::Busy,
            other => RefuseReason::Other(other),
        }
    }
}

impl fmt::Display for RefuseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RefuseReason::Version => f.write_str("protocol version mismatch"),
            RefuseReason::Link => f.write_str("link name mismatch"),
            RefuseReason::SourceCluster => f.write_str("source cluster mismatch"),
            RefuseReason::Role => f.write_str("role conflict"),
            RefuseReason::Features => f.write_str("required feature missing"),
            RefuseReason::Protocol => f.write_str("protocol violation"),
            RefuseReason::Busy => f.write_str("link busy"),
            RefuseReason::Other(code) => write!(f, "reason code {code}"),
        }
    }
}

/// A Kafka topic id: 16 bytes (the bucket contract's *lineage* in its character form).
pub type TopicId = [u8; 16];

/// Which partition a frame is about. The topic id makes a recreated topic (a new
/// lineage) a different partition, as in the bucket contract.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PartitionRef {
    pub topic: String,
    pub partition: i32,
    pub topic_id: TopicId,
}

/// Feature bit 0: the shipper sends LogStart frames (the source's log start
/// moved, retention) and the applier deletes what the source deleted
/// (`docs/direct-protocol.md` §6, LogStart). A session without it simply never
/// carries the frame: the mirror then keeps every segment it ever received.
pub const FEATURE_LOG_START: u64 = 1 << 0;

/// Feature bit 1: the shipper may send SegmentReplace frames (a compaction
/// rewrote sealed segments) and the applier validates and installs them
/// (`docs/direct-protocol.md` §6, SegmentReplace). Without it the mirror keeps
/// the versions it sealed.
pub const FEATURE_SEGMENT_REPLACE: u64 = 1 << 1;

/// Feature bit 2: the shipper sends SourceProgress frames (the source's log end,
/// high watermark and active segment size) and the applier records them for
/// `segmirror status` (`docs/direct-protocol.md` §6, SourceProgress). Without
/// it status cannot tell how far the source is ahead.
pub const FEATURE_SOURCE_PROGRESS: u64 = 1 << 2;

/// Feature bit 3: a seal's offset or time index sent as a digest may name the `index.interval.bytes` to rebuild
/// it with (companion form 2, `docs/direct-protocol.md` §3.3), so a topic with another interval than Kafka's default
/// gets the broker's own indexes on the mirror without their bytes on the wire. On a session without it the shipper
/// drops the interval, and an applier rebuilding with the default refuses such a seal by its digest (as before the
/// bit existed): upgrade the applier.
pub const FEATURE_INDEX_INTERVAL: u64 = 1 << 3;

/// Feature bit 4: a SourceProgress frame ends with the shipper's send position of the partition (`shipped`, for
/// the "shipped" column of `segmirror status`; `docs/direct-protocol.md` §3.3). An applier without it would refuse
/// the trailing bytes, so a shipper sends them only when the bit was agreed.
pub const FEATURE_PROGRESS_SHIPPED: u64 = 1 << 4;

/// Feature bit 5: each Resume position is followed by the mirror's [`LogEnd`](super::payload::LogEnd) (its end
/// offset and last leader epoch, read off its own batches), and the shipper may send Truncate frames (frame 14):
/// the source truncated what was shipped (`--upto log-end`: the applier truncates the mirror to match and archives
/// what it removes) or lost committed data (`--upto high-watermark`: the applier records it and the partition
/// stops). Without it a source shorter than the mirror stops the session (`docs/direct-protocol.md` §6, Truncate).
pub const FEATURE_TRUNCATE: u64 = 1 << 5;
/// Feature bit 6: several shippers (one beside each source broker) on one link. A shipper offering it names its
/// broker in its Hello (`shipper_node_id`) and requires it; the applier serves one session per (link, node id), lists
/// nothing in Resume, and grants partitions by leader epoch (Claim, ClaimResult, Revoke), and a mirror segment may
/// end where no broker file ends (Roll). `docs/direct-protocol.md` §6.1.
pub const FEATURE_CLUSTER_SHIPPERS: u64 = 1 << 6;
/// Feature bit 7: right after Resume the applier sends MirrorLayout frames (frame 19): per partition of the
/// Resume, the mirror's sealed segments (base, size). The shipper compares them with the source's segments and
/// replaces every one the cleaner rewrote while it did not run (`docs/direct-protocol.md` §6, MirrorLayout).
/// Without it the shipper knows only what it shipped itself, and a mirror keeps the larger versions of segments
/// compacted while no shipper ran.
pub const FEATURE_MIRROR_LAYOUT: u64 = 1 << 7;
/// Feature bit 8: the shipper sends its link's metadata (the source's topics with partition counts and configs, and
/// the consumer groups' committed offsets: the documents of `segmirror_contract::link_meta`, as a bucket carries them) in
/// LinkMeta frames (frame 20) whenever it changed, and the applier records each complete version in its catalog
/// (`docs/direct-protocol.md` §6, LinkMeta). Without it plain `ship` carries segments only.
pub const FEATURE_LINK_META: u64 = 1 << 8;
/// Feature bit 9: right after HelloAck the shipper names its link record's id (LinkId, frame 21), and the applier
/// refuses a shipper of another link of the same name (one deleted and recreated), naming both ids
/// (`docs/direct-protocol.md` §4, link identity). Offered by a shipper only when it has a link record, by an
/// applier only when it checks ids.
pub const FEATURE_LINK_ID: u64 = 1 << 9;
/// Feature bit 10: the shipper ships records above the source's high watermark (`--upto log-end`), which a leader
/// change may still truncate. Offered by a shipper only in that mode; an applier that agrees records it with each
/// partition's SourceProgress, so that what reads the mirror for committed records only (`segmirror serve`'s
/// `read_committed`) stops at the high watermark the shipper last reported. Without it an applier takes every
/// record it installs for committed, as a shipper in the default mode ships only those (`docs/direct-protocol.md`
/// §6, SourceProgress).
pub const FEATURE_UNCOMMITTED: u64 = 1 << 10;
