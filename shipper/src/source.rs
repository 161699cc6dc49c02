//! The source side of shipping: reading a live Kafka broker's log dirs.
//!
//! Everything a shipper must know about a source that a broker keeps writing
//! while it is read lives here, apart from any way of carrying the bytes and
//! any plan of what to ship: these modules use no store, lease or manifest
//! listing, so the bucket drivers ([`crate::bucket`]) and the direct feed
//! ([`crate::direct`]) read the source the same way.
//!
//! - [`discover`](mod@discover): the partition directories of a set of log dirs, selected by
//!   a [`TopicFilter`] (MirrorMaker 2's `topics` list), with internal topics,
//!   `-delete`/`-future`/`-stray` directories and partitions without a topic id
//!   skipped and reported as Kafka would not serve them.
//! - [`read`]: one partition's segments in offset order, each with what
//!   bounding it needs, and its leader epochs; a partition with an entry that
//!   is not a regular file is refused.
//! - [`bound`]: exactly which bytes of which files make one segment's
//!   version: a sealed segment whole and verified, the active one up to its
//!   last complete CRC-valid batch with indexes rebuilt for that prefix
//!   ([`rebuild`]); typed outcomes for "corrupt" and "changed under us".
//! - [`footprint`]: the pages of a segment that were not cached before it
//!   was read, dropped once it is shipped, so a seed leaves the broker's page
//!   cache as it found it.
//! - [`guard`]: telling that a file changed while it was read (length,
//!   modification time, inode before and after) and how often to look again.
//! - [`snapshot`]: the producer snapshot a broker writes at the log end.
//! - [`growing`]: the end of the active segment as the broker appends to it,
//!   read incrementally ([`read_tail`]): from a validated position, the newly appended whole CRC-valid batches as a
//!   [`Chunk`] with its CRC-32C, each byte once; typed outcomes for a file
//!   truncated, replaced or rewritten under the position.
//! - [`watch`](mod@watch): notifications (plus a periodic rescan) turned into
//!   typed, coalesced per-partition events (grew, rolled, segment deleted or
//!   swapped, partition appeared or gone, high watermarks changed).
//! - [`bound_hw`]: how far a tail ships ([`UptoPolicy`]): the high watermark
//!   from `replication-offset-checkpoint` behind the [`HighWatermarkSource`]
//!   seam, or the log end.
//! - [`leadership`]: which partitions this broker leads, so a shipper ships
//!   only those (behind the [`LeadershipSource`](leadership::LeadershipSource) seam).
//! - [`incremental`]: the active segment between the rounds of a bucket
//!   shipper, continued from what the previous round validated and shipped.
//! - [`list_offsets`]: the same high watermark asked of the source broker
//!   with `ListOffsets` over the Kafka protocol, a round trip behind the
//!   broker instead of a checkpoint interval.
//! - [`fetch_hw`]: the same high watermark learned as it moves, by a `Fetch`
//!   the broker parks until it moves (`--source-bootstrap`'s default), with
//!   `ListOffsets` to learn it first and to fall back on.
//!
//! A driver's loop, as the seed runs it: [`discover()`] once, then per
//! partition [`read_partition`], then per segment [`bound_sealed`] or
//! [`bound_active`]. An `Outcome::Changed` means: list the partition again
//! and retry. A tail driver instead takes [`watch()`]'s events as hints: on
//! each it lists the partition again ([`read_partition`]) and continues each
//! followed segment with [`read_tail`] up to the [`Bound`] of its
//! [`UptoPolicy`]; a roll shows as a listing where the segment has a
//! successor, and a `Replaced`/`Truncated`/`Changed` outcome sends it back to
//! the listing.
//!
//! All functions here except [`watch()`] block (directory listings, file
//! reads, scans); async callers run them in `spawn_blocking`.

pub mod bound;
pub mod bound_hw;
pub mod discover;
pub mod fetch_hw;
pub mod footprint;
pub mod growing;
pub mod guard;
pub mod incremental;
pub mod leadership;
pub mod list_offsets;
pub mod read;
pub mod rebuild;
pub mod snapshot;
pub mod watch;

#[cfg(test)]
mod tests;

pub use bound::{
    bound_active, bound_sealed, seal_in_place, LocalFile, Outcome, PrepareOptions, Prepared, SegmentStats, SourceGuard,
};
pub use bound_hw::{
    bound as upto_bound, Bound, CheckpointHighWatermarks, HighWatermark, HighWatermarkSource, UptoPolicy,
    CHECKPOINT_INTERVAL,
};
pub use discover::{
    discover, Discovery, SkipReason, SkippedPartition, SourcePartition, TopicFilter, Unusable, UnusablePartition,
    ALL_TOPICS,
};
pub use fetch_hw::{FetchHighWatermarks, FetchHwConfig, Learning as HighWatermarkLearning};
pub use footprint::CacheFootprint;
pub use growing::{
    combine_crc32c, prefix_crc32c, read_tail, read_tail_into, Chunk, ChunkContent, TailOptions, TailPosition, TailRead,
};
pub use guard::{file_identity, stamps, FileIdentity, FileStamp, Retry, Stamps, Verdict, CHECK_ATTEMPTS, SETTLE_DELAY};
pub use list_offsets::{ListOffsetsConfig, LIST_OFFSETS_INTERVAL};
pub use read::{read_partition, PartitionRead, PartitionView, SegmentView};
pub use snapshot::{end_snapshot, EndSnapshot};
pub use watch::{watch, PartitionId, WatchConfig, WatchEvent, Watcher};
