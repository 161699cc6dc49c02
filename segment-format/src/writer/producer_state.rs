//! Producer state as Kafka's `ProducerStateManager` keeps it while a partition is
//! appended to, and the snapshots it writes from it.
//!
//! A broker restarted on our output loads the newest `<offset>.snapshot` and
//! replays only the batches after it, so the snapshot contents decide what
//! idempotent producers may send next and which transactions are still open.
//! This module applies Kafka's update rules batch by batch
//! (`ProducerAppendInfo.appendDataBatch` / `appendEndTxnMarker` and
//! `ProducerStateEntry.update`):
//!
//! - a data batch with a producer id records its epoch, last sequence, last
//!   offset, offset delta and max timestamp (an epoch change forgets the older
//!   batch metadata), and a transactional batch opens a transaction at its base
//!   offset if none is open;
//! - a COMMIT/ABORT marker sets the epoch (which, if it changes, forgets the batch
//!   metadata), the coordinator epoch and the marker record's timestamp, and
//!   closes the transaction.
//!
//! Sequence, epoch and coordinator-epoch *validation* is left out: the writer
//! behaves like a follower (`AppendOrigin.REPLICATION`), which accepts what the
//! leader wrote. Producer expiry (`producer.id.expiration.ms`, wall-clock based)
//! is left out too, so every producer ever seen is in every later snapshot.
//!
//! Entries are serialised in the iteration order of the Java `HashMap<Long, …>`
//! Kafka keeps them in ([`JavaLongHashOrder`]), so snapshot files are
//! byte-identical to a broker's.

use std::collections::HashMap;

use crate::batch::{NO_PRODUCER_EPOCH, NO_SEQUENCE, NO_TIMESTAMP};
use crate::snapshot::{ProducerSnapshot, ProducerSnapshotEntry};

/// `ProducerStateEntry.NUM_BATCHES_TO_RETAIN`: metadata of this many recent
/// batches is kept per producer (for duplicate detection); only the last one is
/// written to a snapshot.
pub const NUM_BATCHES_TO_RETAIN: usize = 5;

/// `BatchMetadata`: what is remembered of one data batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMetadata {
    pub last_seq: i32,
    pub last_offset: i64,
    pub offset_delta: i32,
    pub timestamp: i64,
}

/// `ProducerStateEntry`: the state of one producer id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub last_timestamp: i64,
    pub current_txn_first_offset: Option<i64>,
    /// Oldest first, at most [`NUM_BATCHES_TO_RETAIN`].
    pub batches: Vec<BatchMetadata>,
}

impl ProducerEntry {
    /// `ProducerStateEntry.empty`.
    fn empty(producer_id: i64) -> Self {
        ProducerEntry {
            producer_id,
            producer_epoch: NO_PRODUCER_EPOCH,
            coordinator_epoch: -1,
            last_timestamp: NO_TIMESTAMP,
            current_txn_first_offset: None,
            batches: Vec::new(),
        }
    }

    /// `maybeUpdateProducerEpoch`: a new epoch forgets the batch metadata.
    fn set_epoch(&mut self, epoch: i16) {
        if self.producer_epoch != epoch {
            self.batches.clear();
            self.producer_epoch = epoch;
        }
    }

    /// The snapshot entry `ProducerStateManager.writeSnapshot` makes of this state.
    pub fn to_snapshot_entry(&self) -> ProducerSnapshotEntry {
        let last = self.batches.last();
        ProducerSnapshotEntry {
            producer_id: self.producer_id,
            epoch: self.producer_epoch,
            last_sequence: last.map_or(NO_SEQUENCE, |b| b.last_seq),
            last_offset: last.map_or(-1, |b| b.last_offset),
            offset_delta: last.map_or(0, |b| b.offset_delta),
            timestamp: self.last_timestamp,
            coordinator_epoch: self.coordinator_epoch,
            current_txn_first_offset: self.current_txn_first_offset.unwrap_or(-1),
        }
    }
}

/// A data batch as producer state sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataBatch {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// `RecordBatch.lastSequence()` (-1 without sequences).
    pub last_seq: i32,
    pub base_offset: i64,
    pub last_offset: i64,
    pub max_timestamp: i64,
    pub transactional: bool,
}

/// Why producer state refuses a batch (Kafka throws for it on every append path,
/// replication included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProducerStateError {
    /// `InvalidTxnStateException`: a non-transactional batch while the producer
    /// has a transaction open.
    NonTransactionalInTransaction { producer_id: i64, open_since: i64 },
}

impl std::fmt::Display for ProducerStateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProducerStateError::NonTransactionalInTransaction {
                producer_id,
                open_since,
            } => write!(
                f,
                "non-transactional batch from producer {producer_id}, whose transaction opened at offset \
                 {open_since} is still open"
            ),
        }
    }
}

/// The producers of one partition and the snapshot bookkeeping
/// (`lastMapOffset`, `lastSnapOffset`) of `ProducerStateManager`.
#[derive(Debug, Clone)]
pub struct ProducerState {
    producers: HashMap<i64, ProducerEntry>,
    order: JavaLongHashOrder,
    last_map_offset: i64,
    last_snap_offset: i64,
}

impl ProducerState {
    /// Fresh state of a log whose start offset is `log_start_offset` (as
    /// `loadFromSnapshot` leaves it when there is no snapshot).
    pub fn new(log_start_offset: i64) -> Self {
        ProducerState {
            producers: HashMap::new(),
            order: JavaLongHashOrder::default(),
            last_map_offset: log_start_offset,
            last_snap_offset: log_start_offset,
        }
    }

    fn entry(&mut self, producer_id: i64) -> &mut ProducerEntry {
        if !self.producers.contains_key(&producer_id) {
            self.order.insert(producer_id);
        }
        self.producers
            .entry(producer_id)
            .or_insert_with(|| ProducerEntry::empty(producer_id))
    }

    /// Whether [`ProducerState::append_data`] would accept `b`, without applying it.
    pub fn check_data(&self, b: &DataBatch) -> Result<(), ProducerStateError> {
        match self
            .producers
            .get(&b.producer_id)
            .and_then(|e| e.current_txn_first_offset)
        {
            Some(open_since) if !b.transactional => Err(ProducerStateError::NonTransactionalInTransaction {
                producer_id: b.producer_id,
                open_since,
            }),
            _ => Ok(()),
        }
    }

    /// Apply a data batch of a producer (`batch.hasProducerId`).
    pub fn append_data(&mut self, b: &DataBatch) -> Result<(), ProducerStateError> {
        self.check_data(b)?;
        let e = self.entry(b.producer_id);
        e.set_epoch(b.producer_epoch);
        if e.batches.len() == NUM_BATCHES_TO_RETAIN {
            e.batches.remove(0);
        }
        e.batches.push(BatchMetadata {
            last_seq: b.last_seq,
            last_offset: b.last_offset,
            // `(int) (lastOffset - firstOffset)`.
            offset_delta: b.last_offset.wrapping_sub(b.base_offset) as i32,
            timestamp: b.max_timestamp,
        });
        e.last_timestamp = b.max_timestamp;
        if b.transactional && e.current_txn_first_offset.is_none() {
            e.current_txn_first_offset = Some(b.base_offset);
        }
        Ok(())
    }

    /// Apply a COMMIT or ABORT marker. Returns the first offset of the
    /// transaction it closes, if one was open.
    pub fn append_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
        timestamp: i64,
    ) -> Option<i64> {
        let e = self.entry(producer_id);
        let closed = e.current_txn_first_offset.take();
        e.set_epoch(producer_epoch);
        e.coordinator_epoch = coordinator_epoch;
        e.last_timestamp = timestamp;
        closed
    }

    /// An empty control batch: `ProducerStateManager.update` with an unchanged
    /// entry, which adds an empty one (epoch -1, no batches) for an unknown producer.
    pub fn touch(&mut self, producer_id: i64) {
        self.entry(producer_id);
    }

    /// `updateMapEndOffset`.
    pub fn update_map_end_offset(&mut self, offset: i64) {
        self.last_map_offset = offset;
    }

    /// `takeSnapshot`: the snapshot to write at `lastMapOffset`, unless that
    /// offset is not past the last snapshot's.
    pub fn take_snapshot(&mut self) -> Option<(i64, ProducerSnapshot)> {
        if self.last_map_offset <= self.last_snap_offset {
            return None;
        }
        self.last_snap_offset = self.last_map_offset;
        Some((self.last_map_offset, self.snapshot()))
    }

    /// The current state as a snapshot, entries in Java `HashMap` order.
    pub fn snapshot(&self) -> ProducerSnapshot {
        ProducerSnapshot {
            entries: self
                .order
                .iteration_order()
                .filter_map(|pid| self.producers.get(&pid))
                .map(ProducerEntry::to_snapshot_entry)
                .collect(),
        }
    }

    pub fn get(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }
}

/// The iteration order of a `java.util.HashMap<Long, V>` built with the default
/// constructor and only ever inserted into.
///
/// Java iterates bucket by bucket (`hash & (capacity - 1)`, with
/// `hash = h ^ (h >>> 16)` and `h = Long.hashCode`), and within a bucket in
/// insertion order, which resizes preserve. The table starts at 16 buckets and
/// doubles when the size exceeds 3/4 of the capacity, or when a bucket reaches
/// 9 entries while the table has fewer than 64 buckets (`treeifyBin`). A bucket
/// of 9+ entries in a larger table becomes a tree whose order is not modelled;
/// that needs 9 producer ids colliding in their low hash bits.
#[derive(Debug, Clone, Default)]
pub struct JavaLongHashOrder {
    /// Keys in insertion order.
    keys: Vec<i64>,
    /// 0 until the first insertion allocates the table.
    capacity: usize,
}

/// `HashMap.DEFAULT_INITIAL_CAPACITY`.
const JAVA_INITIAL_CAPACITY: usize = 16;
/// `HashMap.TREEIFY_THRESHOLD`.
const JAVA_TREEIFY_THRESHOLD: usize = 8;
/// `HashMap.MIN_TREEIFY_CAPACITY`.
const JAVA_MIN_TREEIFY_CAPACITY: usize = 64;

impl JavaLongHashOrder {
    /// `HashMap.hash(Long.valueOf(key))`.
    pub fn spread_hash(key: i64) -> u32 {
        let h = (key ^ ((key as u64) >> 32) as i64) as u32;
        h ^ (h >> 16)
    }

    fn bucket(&self, key: i64) -> usize {
        Self::spread_hash(key) as usize & (self.capacity - 1)
    }

    /// Record the insertion of a key not yet present.
    pub fn insert(&mut self, key: i64) {
        if self.capacity == 0 {
            self.capacity = JAVA_INITIAL_CAPACITY;
        }
        let bucket = self.bucket(key);
        let before = self.keys.iter().filter(|&&k| self.bucket(k) == bucket).count();
        self.keys.push(key);
        // `putVal`: appending to a chain of >= TREEIFY_THRESHOLD nodes calls
        // `treeifyBin`, which resizes instead while the table is small.
        if before >= JAVA_TREEIFY_THRESHOLD && self.capacity < JAVA_MIN_TREEIFY_CAPACITY {
            self.capacity *= 2;
        }
        // `++size > threshold` (threshold = 0.75 * capacity).
        if self.keys.len() > self.capacity / 4 * 3 {
            self.capacity *= 2;
        }
    }

    /// Keys in the order Java would iterate them.
    pub fn iteration_order(&self) -> impl Iterator<Item = i64> + '_ {
        let mut order: Vec<(usize, usize, i64)> = self
            .keys
            .iter()
            .enumerate()
            .map(|(seq, &k)| (self.bucket(k), seq, k))
            .collect();
        order.sort_unstable();
        order.into_iter().map(|(_, _, k)| k)
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pid: i64, epoch: i16, base_seq: i32, base: i64, last: i64, ts: i64, txn: bool) -> DataBatch {
        DataBatch {
            producer_id: pid,
            producer_epoch: epoch,
            last_seq: crate::batch::increment_sequence(base_seq, (last - base) as i32),
            base_offset: base,
            last_offset: last,
            max_timestamp: ts,
            transactional: txn,
        }
    }

    #[test]
    fn data_batches_keep_the_last_batch_and_at_most_five() {
        let mut s = ProducerState::new(0);
        for i in 0..7 {
            s.append_data(&data(
                7,
                0,
                i * 10,
                i64::from(i) * 10,
                i64::from(i) * 10 + 9,
                100 + i64::from(i),
                false,
            ))
            .unwrap();
        }
        let e = s.get(7).unwrap();
        assert_eq!(e.batches.len(), NUM_BATCHES_TO_RETAIN);
        assert_eq!(e.batches[0].last_offset, 29);
        assert_eq!(
            e.to_snapshot_entry(),
            ProducerSnapshotEntry {
                producer_id: 7,
                epoch: 0,
                last_sequence: 69,
                last_offset: 69,
                offset_delta: 9,
                timestamp: 106,
                coordinator_epoch: -1,
                current_txn_first_offset: -1,
            }
        );
    }

    #[test]
    fn epoch_bump_forgets_batches() {
        let mut s = ProducerState::new(0);
        s.append_data(&data(1, 0, 0, 0, 4, 10, false)).unwrap();
        s.append_data(&data(1, 1, 0, 5, 5, 11, false)).unwrap();
        let e = s.get(1).unwrap();
        assert_eq!(e.batches.len(), 1);
        assert_eq!((e.producer_epoch, e.to_snapshot_entry().last_sequence), (1, 0));
    }

    #[test]
    fn markers_close_transactions_and_keep_data_metadata() {
        let mut s = ProducerState::new(0);
        s.append_data(&data(3, 2, 0, 10, 12, 50, true)).unwrap();
        s.append_data(&data(3, 2, 3, 13, 13, 49, true)).unwrap();
        assert_eq!(s.get(3).unwrap().current_txn_first_offset, Some(10));
        assert_eq!(s.append_marker(3, 2, 5, 77), Some(10));
        let snap = s.get(3).unwrap().to_snapshot_entry();
        assert_eq!(
            snap,
            ProducerSnapshotEntry {
                producer_id: 3,
                epoch: 2,
                last_sequence: 3,
                last_offset: 13,
                offset_delta: 0,
                timestamp: 77,
                coordinator_epoch: 5,
                current_txn_first_offset: -1,
            }
        );
        // A marker without data closes nothing; a marker with a new epoch forgets batches.
        assert_eq!(s.append_marker(3, 3, 6, 78), None);
        let snap = s.get(3).unwrap().to_snapshot_entry();
        assert_eq!(
            (snap.epoch, snap.last_offset, snap.last_sequence, snap.offset_delta),
            (3, -1, -1, 0)
        );
    }

    #[test]
    fn non_transactional_batch_inside_a_transaction_is_refused() {
        let mut s = ProducerState::new(0);
        s.append_data(&data(3, 0, 0, 0, 0, 1, true)).unwrap();
        assert_eq!(
            s.append_data(&data(3, 0, 1, 1, 1, 1, false)),
            Err(ProducerStateError::NonTransactionalInTransaction {
                producer_id: 3,
                open_since: 0
            })
        );
    }

    #[test]
    fn snapshots_only_advance() {
        let mut s = ProducerState::new(100);
        assert!(s.take_snapshot().is_none());
        s.update_map_end_offset(150);
        assert_eq!(s.take_snapshot().map(|(o, _)| o), Some(150));
        assert!(s.take_snapshot().is_none());
    }

    /// Orders computed by hand from the JDK rules (bucket = spread hash & (n - 1),
    /// insertion order within a bucket).
    #[test]
    fn java_hash_order() {
        assert_eq!(JavaLongHashOrder::spread_hash(1), 1);
        assert_eq!(JavaLongHashOrder::spread_hash(-1), 0);
        // Long.hashCode(1L << 32) = 1; spread = 1.
        assert_eq!(JavaLongHashOrder::spread_hash(1 << 32), 1);
        assert_eq!(JavaLongHashOrder::spread_hash(0x1_0000), 0x1_0001);
        let mut o = JavaLongHashOrder::default();
        for k in [17, 1, 16, 3, 1 << 32] {
            o.insert(k);
        }
        // 16 buckets: 17 -> 1, 1 -> 1, 16 -> 0, 3 -> 3, 1<<32 -> 1.
        assert_eq!(o.iteration_order().collect::<Vec<_>>(), vec![16, 17, 1, 1 << 32, 3]);
        // 13 keys exceed the threshold of 12: 32 buckets, so 17 gets a bucket of its own after 12.
        let mut o = JavaLongHashOrder::default();
        for k in (0..13).rev().chain([17]) {
            o.insert(k);
        }
        assert_eq!(o.capacity, 32);
        let got: Vec<i64> = o.iteration_order().collect();
        assert_eq!(got, vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 17]);
    }

    #[test]
    fn long_collision_chains_resize_small_tables() {
        let mut o = JavaLongHashOrder::default();
        // All in bucket 0 of a 16-slot table: multiples of 16 up to 9 keys.
        for i in 0..9 {
            o.insert(i * 16);
        }
        // The 9th insertion found a chain of 8: treeifyBin resized to 32.
        assert_eq!(o.capacity, 32);
        let got: Vec<i64> = o.iteration_order().collect();
        assert_eq!(got, vec![0, 32, 64, 96, 128, 16, 48, 80, 112]);
    }
}
