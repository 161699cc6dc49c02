//! The replica over a mirror root: the mirror partitions an applier installs, served as they become durable.
//!
//! Who decides what is durable: not this module. The service that runs the endpoint reads the catalog (installed
//! ends, topics and configs the link carries, the link's state) and the direct applier's state files (the active
//! segment's durable end), and hands them in as [`LinkFacts`] through [`MirrorReplica::refresh`], on a blocking
//! thread, every few milliseconds. This module keeps the ends those facts give, follows each partition's open
//! transactions up to its end for the last stable offset (`segments::OpenTransactions`, which reads only what
//! is new since the last refresh), and wakes waiting fetches when any end moved. Reads go straight to the files
//! (`segments`), never past the end the facts gave.
//!
//! The ends may move backwards: a source truncation the applier follows takes installed bytes back. A client
//! that read past the new end gets OFFSET_OUT_OF_RANGE at its next fetch and resets as its policy says; with
//! `--upto high-watermark` (the shipper's default) only committed records are shipped, and the source never
//! truncates those except after an unclean leader election.

pub mod segments;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

use bytes::Bytes;
use tokio::sync::watch;

use crate::replica::{
    AbortedTxn, Isolation, PartitionEnds, ReadError, Records, Replica, ReplicaState, SpannedRecords, TopicView,
};

/// What the service knows of a link's mirror at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkFacts {
    pub state: ReplicaState,
    pub topics: Vec<TopicView>,
    pub partitions: Vec<PartitionFacts>,
}

/// One mirror partition as the catalog and the applier's records describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionFacts {
    pub topic: String,
    pub partition: i32,
    /// The offset after the last batch durable in the mirror and final (`None`: nothing installed yet).
    pub durable_end: Option<i64>,
    /// The source's log start as the link last carried it (the mirror may hold older segments).
    pub log_start: i64,
    /// When the mirror may hold records the source has not committed (its shipper ships above the high watermark,
    /// `--upto log-end`): the offset up to which they are known committed, the high watermark the shipper last
    /// reported. The served high watermark stops there, as a broker's consumers stop at its high watermark, so no
    /// record a source truncation may take back is shown. `None`: every durable record is committed.
    pub committed_end: Option<i64>,
}

/// The replica over one mirror root, for one link.
pub struct MirrorReplica {
    link: String,
    root: PathBuf,
    served: RwLock<Served>,
    /// Each partition as last followed; one lock, taken by the refresh only.
    followed: Mutex<HashMap<(String, i32), Followed>>,
    changes: watch::Sender<u64>,
}

/// One partition as the last refresh left it: the facts it was given, the ends it served, and its transaction
/// follower. Facts equal to the last ones mean nothing moved: the files are not looked at again, so an idle
/// endpoint costs a catalog read per refresh and nothing per partition.
#[derive(Default)]
struct Followed {
    facts: Option<(Option<i64>, i64, Option<i64>)>,
    ends: Option<PartitionEnds>,
    txns: segments::OpenTransactions,
    epochs: segments::EpochHistory,
}

#[derive(Default)]
struct Served {
    state: Option<ReplicaState>,
    topics: Vec<TopicView>,
    ends: BTreeMap<(String, i32), PartitionEnds>,
}

impl MirrorReplica {
    /// A replica serving nothing until the first [`MirrorReplica::refresh`].
    pub fn new(root: impl Into<PathBuf>, link: impl Into<String>) -> Self {
        Self {
            link: link.into(),
            root: root.into(),
            served: RwLock::new(Served::default()),
            followed: Mutex::new(HashMap::new()),
            changes: watch::Sender::new(0),
        }
    }

    /// Take in what the service read; wakes waiting fetches when anything served changed. Blocking (it reads the
    /// batch headers appended since the last refresh). A partition whose files cannot be read keeps its last ends
    /// and the error is returned with the others, so one bad partition does not hide the rest.
    pub fn refresh(&self, facts: &LinkFacts) -> Vec<String> {
        let mut failures = Vec::new();
        let mut ends = BTreeMap::new();
        {
            let mut followed = self.followed.lock().unwrap_or_else(|e| e.into_inner());
            for p in &facts.partitions {
                let key = (p.topic.clone(), p.partition);
                let entry = followed.entry(key.clone()).or_default();
                let given = (p.durable_end, p.log_start, p.committed_end);
                if let (Some(last), Some(ends_then)) = (entry.facts, entry.ends) {
                    if last == given {
                        ends.insert(key, ends_then);
                        continue;
                    }
                }
                let dir = self.partition_dir(&p.topic, p.partition);
                match partition_ends(&dir, p, &mut entry.txns, &mut entry.epochs) {
                    Ok(e) => {
                        entry.facts = Some(given);
                        entry.ends = Some(e);
                        ends.insert(key, e);
                    }
                    Err(e) => {
                        failures.push(format!("{}: {e}", dir.display()));
                        // Keep serving the last ends; the next refresh tries the files again.
                        entry.facts = None;
                        if let Some(old) = entry.ends {
                            ends.insert(key, old);
                        }
                    }
                }
            }
            followed.retain(|key, _| ends.contains_key(key));
        }
        let mut served = self.served.write().unwrap_or_else(|e| e.into_inner());
        let changed =
            served.ends != ends || served.topics != facts.topics || served.state.as_ref() != Some(&facts.state);
        served.ends = ends;
        served.topics = facts.topics.clone();
        served.state = Some(facts.state.clone());
        drop(served);
        if changed {
            self.changes.send_modify(|n| *n = n.wrapping_add(1));
        }
        failures
    }

    fn partition_dir(&self, topic: &str, partition: i32) -> PathBuf {
        self.root.join(format!("{topic}-{partition}"))
    }

    /// The ends a read of `offset` answers with and the offset it must stop before (the high watermark, or the last
    /// stable offset for read_committed); an offset outside the served range is out of range.
    fn bounds(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        isolation: Isolation,
    ) -> Result<(PartitionEnds, i64), ReadError> {
        let ends = self.served_ends(topic, partition)?;
        Ok((ends, ends.read_bound(offset, isolation)?))
    }

    fn served_ends(&self, topic: &str, partition: i32) -> Result<PartitionEnds, ReadError> {
        let served = self.served.read().unwrap_or_else(|e| e.into_inner());
        served
            .ends
            .get(&(topic.to_string(), partition))
            .copied()
            .ok_or(ReadError::UnknownPartition)
    }
}

/// One partition's ends from its facts and files.
fn partition_ends(
    dir: &Path,
    facts: &PartitionFacts,
    txns: &mut segments::OpenTransactions,
    epochs: &mut segments::EpochHistory,
) -> io::Result<PartitionEnds> {
    let Some(end) = facts.durable_end else {
        let start = facts.log_start.max(0);
        return Ok(PartitionEnds {
            log_start: start,
            high_watermark: start,
            last_stable: start,
            leader_epoch: -1,
        });
    };
    let first = segments::log_start(dir)?;
    let log_start = first.unwrap_or(end).max(facts.log_start).min(end);
    // What may still be truncated on the source is held back, from every reader.
    let end = facts
        .committed_end
        .map_or(end, |committed| committed.clamp(log_start, end));
    let last_stable = txns.advance(dir, end)?.clamp(log_start, end);
    Ok(PartitionEnds {
        log_start,
        high_watermark: end,
        last_stable,
        leader_epoch: {
            epochs.advance(dir, end)?;
            epochs.latest()
        },
    })
}

/// A read's error: a segment retention deleted since the ends were read means the offset is below the log start.
fn read_error(dir: &Path, e: io::Error, offset: i64, ends: PartitionEnds) -> ReadError {
    if e.kind() == io::ErrorKind::NotFound {
        ReadError::OutOfRange { offset, ends }
    } else {
        storage(dir, e)
    }
}

/// The aborted transactions of `[from, next)` for a read_committed read, none otherwise.
fn aborted(dir: &Path, from: i64, next: Option<i64>, isolation: Isolation) -> Result<Vec<AbortedTxn>, ReadError> {
    match (isolation, next) {
        (Isolation::ReadCommitted, Some(next)) => {
            segments::aborted_between(dir, from, next).map_err(|e| storage(dir, e))
        }
        _ => Ok(Vec::new()),
    }
}

fn storage(dir: &Path, e: io::Error) -> ReadError {
    ReadError::Storage(format!("{}: {e}", dir.display()))
}

impl Replica for MirrorReplica {
    fn link(&self) -> &str {
        &self.link
    }

    fn state(&self) -> ReplicaState {
        let served = self.served.read().unwrap_or_else(|e| e.into_inner());
        served.state.clone().unwrap_or(ReplicaState::Replicating)
    }

    fn topics(&self) -> Vec<TopicView> {
        self.served.read().map(|s| s.topics.clone()).unwrap_or_default()
    }

    fn ends(&self, topic: &str, partition: i32) -> Result<PartitionEnds, ReadError> {
        self.served_ends(topic, partition)
    }

    fn read(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: usize,
        isolation: Isolation,
    ) -> Result<Records, ReadError> {
        let (ends, upper) = self.bounds(topic, partition, offset, isolation)?;
        let mut records = Records {
            ends,
            bytes: Bytes::new(),
            aborted: Vec::new(),
        };
        if offset >= upper {
            return Ok(records);
        }
        let dir = self.partition_dir(topic, partition);
        let mut buf = Vec::new();
        let fetched = segments::read_batches(&dir, offset, upper, max_bytes, &mut buf)
            .map_err(|e| read_error(&dir, e, offset, ends))?;
        records.aborted = aborted(&dir, offset, fetched.next_offset, isolation)?;
        records.bytes = Bytes::from(buf);
        Ok(records)
    }

    fn read_spans(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: usize,
        isolation: Isolation,
    ) -> Option<Result<SpannedRecords, ReadError>> {
        let located = || {
            let (ends, upper) = self.bounds(topic, partition, offset, isolation)?;
            if offset >= upper {
                return Ok(SpannedRecords {
                    ends,
                    spans: Vec::new(),
                    aborted: Vec::new(),
                });
            }
            let dir = self.partition_dir(topic, partition);
            let (spans, fetched) = segments::span_batches(&dir, offset, upper, max_bytes)
                .map_err(|e| read_error(&dir, e, offset, ends))?;
            Ok(SpannedRecords {
                ends,
                spans,
                aborted: aborted(&dir, offset, fetched.next_offset, isolation)?,
            })
        };
        Some(located())
    }

    fn offset_for_timestamp(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<Option<(i64, i64)>, ReadError> {
        let ends = self.served_ends(topic, partition)?;
        let dir = self.partition_dir(topic, partition);
        let found = segments::offset_for_timestamp(&dir, timestamp, ends.log_start, ends.high_watermark)
            .map_err(|e| storage(&dir, e))?;
        Ok(found.map(|f| (f.offset, f.timestamp)))
    }

    fn max_timestamp(&self, topic: &str, partition: i32) -> Result<Option<(i64, i64)>, ReadError> {
        let ends = self.served_ends(topic, partition)?;
        let dir = self.partition_dir(topic, partition);
        let found = segments::max_timestamp(&dir, ends.high_watermark).map_err(|e| storage(&dir, e))?;
        Ok(found.map(|f| (f.offset, f.timestamp)))
    }

    fn epoch_end(&self, topic: &str, partition: i32, epoch: i32) -> Result<(i32, i64), ReadError> {
        let ends = self.served_ends(topic, partition)?;
        // The history the last refresh brought up to these ends (the checkpoint's, or learned from the batches).
        let followed = self.followed.lock().unwrap_or_else(|e| e.into_inner());
        let history = followed
            .get(&(topic.to_string(), partition))
            .ok_or(ReadError::UnknownPartition)?;
        Ok(history.epochs.end_for(epoch, ends.high_watermark))
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}
