//! Reads of a segment version the cache holds by chunks (`cache::chunks`: a chunked version too large to cache
//! whole), so a partition whose active segment outgrows the cache keeps being served.
//!
//! Every read pins the chunks it reads and stops at their end: a fetch reads a run of chunks from the one holding
//! its offset (as many as its byte budget reaches), a lookup by time walks the chunks from the one holding the log
//! start, `MAX_TIMESTAMP` walks them until the one holding the manifest's largest timestamp. The aborted
//! transactions of a `read_committed` fetch come from the `.txnindex` files alone (`aborted`).
//!
//! The last stable offset of a newest segment held by chunks is followed by a [`ChunkFollower`]: a transaction
//! tracker fed the chunks in order, each fetched, walked once and left to eviction, started from the producer
//! snapshot the shipper shipped at the segment's base (as `segments::OpenTransactions` starts from a snapshot) and
//! carried from version to version while the new version only adds chunks; any other change starts it again.

use segment_format::dir::SegmentFileKind;
use segment_format::snapshot::ProducerSnapshot;
use segment_format::txn_index::TxnTracker;
use segmirror_transport::manifest::{Manifest, Sha256Digest};

use super::cache::{chunk_first, chunk_holding, CacheError, ChunkRun, Pinned, PinnedPart};
use super::{storage, BucketReplica};
use crate::mirror::segments::{self, Fetched, TimestampOffset};
use crate::replica::ReadError;

/// What a read holds while it reads: a whole cached segment, or a run of chunks.
#[derive(Debug)]
pub(super) enum Held {
    Whole { _pin: Pinned },
    Chunks { _run: ChunkRun },
    Part { _pin: PinnedPart },
    Nothing,
}

/// The open transactions of a newest segment held by chunks, followed chunk by chunk (see the module docs).
#[derive(Debug)]
pub(super) struct ChunkFollower {
    base: i64,
    /// The chunks walked, in order, as their objects.
    walked: Vec<(String, Sha256Digest)>,
    tracker: TxnTracker,
}

impl ChunkFollower {
    /// Whether `m` is this segment with the walked chunks as its first ones.
    fn continues(&self, m: &Manifest) -> bool {
        self.base == m.base_offset
            && self.walked.len() <= m.log_chunks.len()
            && self
                .walked
                .iter()
                .zip(&m.log_chunks)
                .all(|((key, sha), c)| *key == c.key && *sha == c.sha256)
    }
}

/// The version key a refused segment version is remembered by.
pub(super) fn version_key(dir_name: &str, m: &Manifest) -> String {
    format!(
        "{dir_name}/{}-{}@{}",
        m.base_offset,
        m.next_offset,
        m.file(SegmentFileKind::Log)
            .map_or_else(String::new, |l| l.sha256.to_string())
    )
}

pub(super) fn read_error(e: CacheError) -> ReadError {
    ReadError::Storage(e.to_string())
}

impl BucketReplica {
    /// Chunks of `m` from chunk `first` on (see `SegmentCache::ensure_chunks`); a version refused once is not
    /// fetched again.
    pub(super) async fn fetch_chunks(
        &self,
        dir_name: &str,
        m: &Manifest,
        first: usize,
        max_bytes: u64,
    ) -> Result<ChunkRun, CacheError> {
        let version = version_key(dir_name, m);
        if let Some(reason) = self.refused.lock().unwrap_or_else(|e| e.into_inner()).get(&version) {
            return Err(CacheError::Refused(reason.clone()));
        }
        let result = self
            .cache
            .ensure_chunks(&*self.source, dir_name, m, first, max_bytes)
            .await;
        if let Err(CacheError::Refused(reason)) = &result {
            self.remember_refusal(version, reason);
        }
        result
    }

    fn fetch_chunks_blocking(
        &self,
        dir_name: &str,
        m: &Manifest,
        first: usize,
        max_bytes: u64,
    ) -> Result<ChunkRun, ReadError> {
        self.runtime
            .block_on(self.fetch_chunks(dir_name, m, first, max_bytes))
            .map_err(read_error)
    }

    /// Fetch: the batches of `m` from `from` below `bound`, read from a run of chunks that reaches `max_bytes`.
    pub(super) fn read_by_chunks(
        &self,
        dir_name: &str,
        m: &Manifest,
        from: i64,
        bound: i64,
        max_bytes: usize,
        buf: &mut Vec<u8>,
    ) -> Result<(Fetched, Held), ReadError> {
        let Some(first) = chunk_holding(m, from) else {
            return Ok((Fetched::default(), Held::Nothing));
        };
        let run = self.fetch_chunks_blocking(dir_name, m, first, max_bytes as u64)?;
        let bound = bound.min(run.next_offset);
        let fetched =
            segments::read_batches(&run.dir, from, bound, max_bytes, buf).map_err(|e| storage(&run.dir, e))?;
        Ok((fetched, Held::Chunks { _run: run }))
    }

    /// ListOffsets by time in `m`: the first record at or after `timestamp`, at or after `start`, below `bound`,
    /// walking the chunks from the one holding `start`.
    pub(super) fn offset_for_timestamp_by_chunks(
        &self,
        dir_name: &str,
        m: &Manifest,
        timestamp: i64,
        start: i64,
        bound: i64,
    ) -> Result<Option<TimestampOffset>, ReadError> {
        let Some(mut i) = chunk_holding(m, start) else {
            return Ok(None);
        };
        while i < m.log_chunks.len() && chunk_first(m, i) < bound {
            let run = self.fetch_chunks_blocking(dir_name, m, i, 0)?;
            let from = start.max(chunk_first(m, i));
            let found = segments::offset_for_timestamp(&run.dir, timestamp, from, bound.min(run.next_offset))
                .map_err(|e| storage(&run.dir, e))?;
            if found.is_some() {
                return Ok(found);
            }
            i += 1;
        }
        Ok(None)
    }

    /// ListOffsets `MAX_TIMESTAMP` in `m` below `bound`: its chunks walked until the manifest's largest timestamp
    /// is found (the first record that has it).
    pub(super) fn max_timestamp_by_chunks(
        &self,
        dir_name: &str,
        m: &Manifest,
        bound: i64,
    ) -> Result<Option<TimestampOffset>, ReadError> {
        let mut best: Option<TimestampOffset> = None;
        for i in 0..m.log_chunks.len() {
            if chunk_first(m, i) >= bound {
                break;
            }
            let run = self.fetch_chunks_blocking(dir_name, m, i, 0)?;
            let found =
                segments::max_timestamp(&run.dir, bound.min(run.next_offset)).map_err(|e| storage(&run.dir, e))?;
            if let Some(f) = found {
                if best.is_none_or(|b| f.timestamp > b.timestamp) {
                    best = Some(f);
                }
            }
            if best.is_some_and(|b| b.timestamp >= m.max_timestamp) {
                break;
            }
        }
        Ok(best)
    }

    /// The last stable offset of the newest segment `tail` held by chunks, below `end` (the high watermark): its
    /// follower fed the chunks it has not walked yet (see the module docs).
    pub(super) async fn follow_chunks(
        &self,
        key: &(String, i32),
        dir_name: &str,
        tail: &Manifest,
        end: i64,
    ) -> Result<i64, String> {
        let taken = self
            .chunk_txns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key)
            .filter(|f| f.continues(tail));
        let mut follower = match taken {
            Some(f) => f,
            None => self.start_follower(dir_name, tail).await?,
        };
        let walked = self.walk_chunks(&mut follower, dir_name, tail, end).await;
        let lso = follower
            .tracker
            .first_unstable_offset()
            .map_or(end, |first| first.min(end));
        self.chunk_txns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone(), follower);
        walked.map(|()| lso)
    }

    async fn walk_chunks(
        &self,
        f: &mut ChunkFollower,
        dir_name: &str,
        tail: &Manifest,
        end: i64,
    ) -> Result<(), String> {
        let failed = |e: String| format!("{dir_name}: following open transactions: {e}");
        for i in f.walked.len()..tail.log_chunks.len() {
            let Some(chunk) = tail.log_chunks.get(i) else { break };
            let run = self
                .fetch_chunks(dir_name, tail, i, 0)
                .await
                .map_err(|e| failed(e.to_string()))?;
            let first = chunk_first(tail, i);
            let mut tracker = std::mem::take(&mut f.tracker);
            let walked = tokio::task::spawn_blocking(move || {
                let result = segments::track_file(&mut tracker, &run.dir, first, end);
                drop(run);
                (tracker, result)
            })
            .await
            .map_err(|e| failed(e.to_string()))?;
            f.tracker = walked.0;
            walked.1.map_err(|e| failed(e.to_string()))?;
            f.walked.push((chunk.key.clone(), chunk.sha256));
        }
        Ok(())
    }

    /// A follower at the start of `tail`: from the producer snapshot shipped at its base, else with nothing open.
    async fn start_follower(&self, dir_name: &str, tail: &Manifest) -> Result<ChunkFollower, String> {
        let at_base = tail
            .all_files()
            .any(|f| f.name.kind == SegmentFileKind::Snapshot && f.name.base_offset == tail.base_offset);
        let mut tracker = TxnTracker::new();
        if at_base {
            let snapshot = self
                .cache
                .ensure_companion(&*self.source, dir_name, tail, SegmentFileKind::Snapshot)
                .await
                .map_err(|e| format!("{dir_name}: producer snapshot of segment {}: {e}", tail.base_offset))?;
            if let Some((path, pinned)) = snapshot {
                let read = tokio::task::spawn_blocking(move || {
                    let read = ProducerSnapshot::read(&path);
                    drop(pinned);
                    read
                })
                .await
                .map_err(|e| e.to_string())?;
                match read {
                    Ok(s) => tracker = TxnTracker::from_snapshot(&s),
                    Err(e) => {
                        return Err(format!(
                            "{dir_name}: producer snapshot of segment {}: {e}",
                            tail.base_offset
                        ))
                    }
                }
            }
        }
        Ok(ChunkFollower {
            base: tail.base_offset,
            walked: Vec::new(),
            tracker,
        })
    }
}
