//! What the endpoint serves, as a trait: the replica's topics and, per partition, its ends and its batches.
//!
//! Why a trait: the same endpoint serves a mirror root (`crate::mirror`) and, without a local mirror, a bucket a
//! shipper fills (the remote read replica). Both answer the same questions; the protocol handlers never know
//! which one they ask.
//!
//! The calls that touch files are blocking (`read`, `offset_for_timestamp`, `epoch_end`): the handlers run them
//! off the async runtime. `ends` and `topics` answer from memory the replica keeps current.

use bytes::Bytes;

/// A topic as served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicView {
    pub name: String,
    /// The source topic's id (all zero when unknown).
    pub id: [u8; 16],
    /// Its partitions' numbers, ascending.
    pub partitions: Vec<i32>,
    /// The source topic's configs the link carries (name, value), for DescribeConfigs.
    pub configs: Vec<(String, String)>,
}

/// The offsets a client sees for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionEnds {
    /// The first offset still held.
    pub log_start: i64,
    /// The end of what is served: every byte below it is durable in the replica and final (the source's high
    /// watermark covered it). Fetches never return a batch at or past it.
    pub high_watermark: i64,
    /// The last stable offset: no transaction is open below it (`read_committed` reads stop here).
    pub last_stable: i64,
    /// The newest leader epoch of the partition (from its `leader-epoch-checkpoint`), -1 when unknown.
    pub leader_epoch: i32,
}

impl PartitionEnds {
    /// Where a read of `offset` must stop: the high watermark, or the last stable offset for read_committed. An
    /// offset below the log start or past the high watermark is out of range (at the high watermark: nothing yet).
    pub fn read_bound(&self, offset: i64, isolation: Isolation) -> Result<i64, ReadError> {
        if offset < self.log_start || offset > self.high_watermark {
            return Err(ReadError::OutOfRange { offset, ends: *self });
        }
        Ok(match isolation {
            Isolation::ReadUncommitted => self.high_watermark,
            Isolation::ReadCommitted => self.last_stable,
        })
    }
}

/// How far a fetch may read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isolation {
    /// Up to the high watermark.
    ReadUncommitted,
    /// Up to the last stable offset, with the aborted transactions in the range.
    ReadCommitted,
}

impl Isolation {
    /// Kafka's wire value: 0 read_uncommitted, 1 read_committed.
    pub fn from_wire(level: i8) -> Self {
        if level == 1 {
            Self::ReadCommitted
        } else {
            Self::ReadUncommitted
        }
    }
}

/// A transaction aborted in a fetched range: the client drops its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
}

/// What a read returns: whole batches, their ends, and (read_committed) the aborted transactions among them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Records {
    /// The ends the read was bounded by.
    pub ends: PartitionEnds,
    /// Whole record batches from the one holding the fetch offset, byte for byte as on disk; empty at the end.
    pub bytes: Bytes,
    /// Read committed only: transactions aborted in the range read.
    pub aborted: Vec<AbortedTxn>,
}

/// A run of whole batches in an open segment file: what a plaintext response sends straight from the file
/// (`sendfile`), never copied through this process.
#[derive(Debug, Clone)]
pub struct FileSpan {
    pub file: std::sync::Arc<std::fs::File>,
    pub position: u64,
    pub len: u64,
}

/// [`Records`] as file spans instead of bytes: the same batches, located but not read.
#[derive(Debug, Clone)]
pub struct SpannedRecords {
    pub ends: PartitionEnds,
    pub spans: Vec<FileSpan>,
    /// Read committed only: transactions aborted in the range.
    pub aborted: Vec<AbortedTxn>,
}

impl SpannedRecords {
    /// Bytes the spans cover.
    pub fn len(&self) -> u64 {
        self.spans.iter().map(|s| s.len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Why a partition could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No such topic or partition in the replica.
    #[error("unknown topic or partition")]
    UnknownPartition,
    /// The offset is below the log start or past the high watermark.
    #[error("offset {offset} is outside [{}, {}]", ends.log_start, ends.high_watermark)]
    OutOfRange { offset: i64, ends: PartitionEnds },
    /// The replica's storage failed or holds what it should not (a local fault: that partition's answer only).
    #[error("{0}")]
    Storage(String),
}

/// Where the link of the replica stands; the endpoint stops serving when it is no longer a replica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaState {
    /// Being replicated: served read-only.
    Replicating,
    /// The link was promoted: its topics live on the target cluster now, which `target` names when known.
    Promoted { target: Option<String> },
    /// The link was deleted.
    Deleted,
}

/// A replica the endpoint serves.
pub trait Replica: Send + Sync + 'static {
    /// The link whose topics these are (for messages: "a read-only mirror of link L").
    fn link(&self) -> &str;
    /// Where the link stands now.
    fn state(&self) -> ReplicaState;
    /// The topics served, by name.
    fn topics(&self) -> Vec<TopicView>;
    /// One partition's ends as of now.
    fn ends(&self, topic: &str, partition: i32) -> Result<PartitionEnds, ReadError>;
    /// Whole batches from the batch holding `offset`, at most `max_bytes` of them unless the first alone is
    /// larger (then that one batch, as Kafka does), never past the bound of `isolation`. Blocking.
    fn read(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: usize,
        isolation: Isolation,
    ) -> Result<Records, ReadError>;
    /// As [`Replica::read`], the batches located in their files rather than read, for a response sent with
    /// `sendfile`; `None` when this replica has no files to send from (then `read` is used). Blocking.
    fn read_spans(
        &self,
        _topic: &str,
        _partition: i32,
        _offset: i64,
        _max_bytes: usize,
        _isolation: Isolation,
    ) -> Option<Result<SpannedRecords, ReadError>> {
        None
    }
    /// The first offset whose batch's max timestamp is at or after `timestamp`, with that timestamp (ListOffsets
    /// by time); `None` when no served record is that late. Blocking.
    fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<Option<(i64, i64)>, ReadError>;
    /// The offset of the record with the largest timestamp served, with that timestamp (ListOffsets -3). Blocking.
    fn max_timestamp(&self, topic: &str, partition: i32) -> Result<Option<(i64, i64)>, ReadError>;
    /// The largest epoch at or below `epoch` and the offset where it ends (OffsetForLeaderEpoch): the start of
    /// the next epoch, or the high watermark for the newest. Blocking.
    fn epoch_end(&self, topic: &str, partition: i32, epoch: i32) -> Result<(i32, i64), ReadError>;
    /// A receiver that changes whenever any partition's ends may have moved (long-polling fetches wait on it).
    fn changes(&self) -> tokio::sync::watch::Receiver<u64>;
}
