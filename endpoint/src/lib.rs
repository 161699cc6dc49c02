//! A read-only Kafka-protocol endpoint over a replica: `segmirror serve`.
//!
//! Why it exists: a mirror holds the source's record batches byte for byte, with their offsets, indexes, leader
//! epochs and transaction markers. Stock clients (the Java consumer, librdkafka, kcat) can read it while
//! replication runs if something speaks the Kafka protocol over it: this crate. It hands the segment bytes out
//! unchanged (no decompression, no re-encoding), so a consumer sees exactly the source's records at the source's
//! offsets, and it refuses every write with the error code that makes a producer fail fast.
//!
//! The layers, top down:
//! - [`server`]: the listener, connections (plaintext or TLS), bounded request frames, and the limits
//!   ([`config`]) that keep a hostile client from costing more than its share (connections, bytes in flight, idle
//!   and write time). Plaintext fetch responses go from the segment files to the socket (`sendfile`).
//! - [`handle`]: one module per API (ApiVersions, Metadata, ListOffsets, Fetch, OffsetForLeaderEpoch,
//!   DescribeConfigs, the group APIs, the refusals): decoded request in, response out.
//! - [`group`]: the classic consumer-group coordinator (join, sync, heartbeat, leave) and the committed offsets,
//!   kept by an [`group::OffsetStore`] the service provides (the catalog).
//! - [`replica`]: what is served, as a trait: topics, per-partition ends (log start, high watermark, last stable
//!   offset), reads of whole batches, lookups by time and by leader epoch. [`mirror`] implements it over a mirror
//!   root; [`bucket`] (the remote read replica) implements it over a store a shipper fills.
//!
//! What is served is only what is durable and final: the replica decides its high watermark (see
//! [`replica::Replica::ends`]), and a read never returns a byte at or past it.

pub mod bucket;
pub mod config;
pub mod group;
pub mod handle;
pub mod mirror;
pub mod replica;
pub mod server;

pub use config::{Limits, ServeConfig, MAX_REQUEST_BYTES_DEFAULT};
pub use handle::Endpoint;
pub use replica::{
    AbortedTxn, FileSpan, Isolation, PartitionEnds, ReadError, Records, Replica, ReplicaState, SpannedRecords,
    TopicView,
};
pub use server::serve;
